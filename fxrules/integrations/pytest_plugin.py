"""pytest plugin: the rules of the ``.fxr`` files a project names are test items.

Installing fxrules alone collects nothing: a rule file is collected only under a path the project opts in,
with ``--fxrules PATH`` (repeatable; the paths are also collected, like path arguments) or the ini option
``fxrules_paths``.  Then ``pytest --fxrules rulesets/`` collects ``algebra.fxr::double_neg`` and so on; an
unsound rule (or one in error) fails with its counterexample, an inconclusive one is skipped with the reason.
verify's options are flags and ini options: ``--fxrules-examples``/``fxrules_examples``, ``--fxrules-seed``/
``fxrules_seed`` (``--hypothesis-seed`` works too), ``--fxrules-max-side``/``fxrules_max_side``,
``--fxrules-dtypes``/``fxrules_dtypes``, ``--fxrules-database``/``fxrules_database``,
``--fxrules-prove-timeout``/``fxrules_prove_timeout``, and ``--fxrules-no-prove``/``fxrules_prove = false``
to only sample; ``-k`` selects rules.  A rule verify proves (z3 installed) passes as ``PROVED`` in the
verbose report line; its verdict is the item's ``fxrules_verdict`` property (what the prover said,
``fxrules_proof``) and report section (``-rP``).
The rules' user helpers and predicates come from modules with ``HELPERS``/``PREDICATES`` mappings, named by
``--fxrules-helpers MODULE`` (repeatable) or the ini option ``fxrules_helpers`` (one per line), as the
command line's ``--helpers``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from fxrules.diagnostics import FxrError, FxrUsageError
from fxrules.integrations.driving import user_functions
from fxrules.lang.ir import Rule
from fxrules.lang.loader import load
from fxrules.verification.options import VerifyOptions
from fxrules.verification.soundness import Verdict, proves, verify_checked

#: verify's options: (the flag's and ini option's suffix, the keyword of VerifyOptions.checked, help)
_OPTIONS = (
    ("examples", "max_examples", "hypothesis examples per rule"),
    ("seed", "seed", "the seed inputs are drawn from (the same seed, the same inputs)"),
    ("max-side", "max_side", "the largest size of a drawn dim"),
    ("dtypes", "dtypes", "draw tensors of these dtypes only, e.g. float32,int64"),
    ("database", "database", "a directory for hypothesis's failing inputs (without it, nothing is written)"),
    ("prove-timeout", "prove_timeout", "solver seconds per rule when proving"),
)


@attrs.frozen
class _Opted:
    """What the project opted in: the paths whose rule files are collected, verify's options, and the user
    helpers and predicates the rules may call."""

    paths: tuple[Path, ...]
    options: VerifyOptions
    helpers: Mapping[str, Callable[..., Any]] = attrs.Factory(dict)
    predicates: Mapping[str, Callable[..., Any]] = attrs.Factory(dict)

    def collects(self, path: Path) -> bool:
        resolved = path.resolve()
        return any(resolved == root or root in resolved.parents for root in self.paths)


_OPTED = pytest.StashKey[_Opted]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fxrules")
    group.addoption("--fxrules", action="append", default=[], metavar="PATH", dest="fxrules_paths",
                    help="collect the rules of the .fxr files under PATH as tests (repeatable)")
    parser.addini("fxrules_paths", type="paths", default=[],
                  help="collect the rules of the .fxr files under these paths as tests")
    for suffix, _, text in _OPTIONS:
        name = suffix.replace("-", "_")
        group.addoption(f"--fxrules-{suffix}", default=None, dest=f"fxrules_{name}", help=f"verify: {text}")
        parser.addini(f"fxrules_{name}", default=None, help=f"verify: {text}")
    group.addoption("--fxrules-no-prove", action="store_false", default=None, dest="fxrules_prove",
                    help="verify: only sample, do not give the rules to the z3 prover first")
    parser.addini("fxrules_prove", type="bool", default=True,
                  help="verify: give each rule to the z3 prover first, when it is installed (default true)")
    helpers = "a module whose HELPERS and PREDICATES mappings the rules may call"
    group.addoption("--fxrules-helpers", action="append", default=[], metavar="MODULE", dest="fxrules_helpers",
                    help=f"{helpers} (repeatable)")
    parser.addini("fxrules_helpers", type="linelist", default=[], help=f"{helpers} (one per line)")


def pytest_configure(config: pytest.Config) -> None:
    flagged = [config.invocation_params.dir / path for path in config.getoption("fxrules_paths")]
    paths = tuple(path.resolve() for path in [*flagged, *config.getini("fxrules_paths")])
    config.stash[_OPTED] = _Opted(paths, _options(config), *_user_functions(config))
    if flagged:  # the paths are what to run, as path arguments are: in place of testpaths, or added to the arguments
        given = config.args if config.args_source is pytest.Config.ArgsSource.ARGS else []
        config.args = [*given, *(str(path) for path in flagged)]


def _options(config: pytest.Config) -> VerifyOptions:
    """verify's options from the flags, else the ini file; a bad value stops the run with verify's error."""
    options: dict[str, Any] = {}
    for suffix, keyword, _ in _OPTIONS:
        name = suffix.replace("-", "_")
        sources = [(f"--fxrules-{suffix}", config.getoption(f"fxrules_{name}")),
                   *([("--hypothesis-seed", config.getoption("hypothesis_seed", None))] if name == "seed" else []),
                   (f"ini option fxrules_{name}", config.getini(f"fxrules_{name}"))]
        source, value = next(((s, v) for s, v in sources if v is not None), ("", None))
        if value is None:
            continue
        try:
            VerifyOptions.checked(**{keyword: value})
        except FxrUsageError as error:
            raise pytest.UsageError(f"{source}: {error}") from None
        options[keyword] = value
    return VerifyOptions.checked(**options, prove=_proving(config))


def _proving(config: pytest.Config) -> bool:
    """``--fxrules-no-prove``, else the ini option ``fxrules_prove`` (true unless set to a false value)."""
    flag = config.getoption("fxrules_prove")
    if flag is not None:
        return bool(flag)
    try:
        return bool(config.getini("fxrules_prove"))
    except ValueError:
        raise pytest.UsageError(f"ini option fxrules_prove: must be true or false, got "
                                f"{config.inicfg.get('fxrules_prove')!r}") from None


def _user_functions(config: pytest.Config) -> tuple[dict[str, Callable[..., Any]], dict[str, Callable[..., Any]]]:
    """The helpers and predicates of the modules the flags name, else the ini file's."""
    modules = config.getoption("fxrules_helpers") or config.getini("fxrules_helpers")
    try:
        return user_functions(modules)
    except FxrError as error:
        raise pytest.UsageError(str(error).replace("--helpers", "fxrules_helpers", 1)) from None


def pytest_report_header(config: pytest.Config) -> str | None:
    opted = config.stash[_OPTED]
    if not opted.paths:
        return None
    proving = ", proving with z3" if proves(opted.options) else ""
    return f"fxrules: rules under {', '.join(map(str, opted.paths))} (seed {opted.options.seed}{proving})"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if (file_path.suffix == ".fxr" and file_path.name != "prelude.fxr"
            and parent.config.stash[_OPTED].collects(file_path)):
        return FxrFile.from_parent(parent, path=file_path)
    return None


class FxrFile(pytest.File):
    """A rule file: one item per rule (a file that fails to load is one failing item)."""

    def collect(self) -> Iterator[pytest.Item]:
        try:
            ruleset = load(self.path)
        except FxrError as error:
            yield FxrLoadItem.from_parent(self, name="<load>", error=error)
            return
        for rule in ruleset:
            if Path(rule.file).resolve() == self.path.resolve():  # included rules belong to their own file
                yield FxrRuleItem.from_parent(self, name=rule.name, rule=rule)


class FxrRuleItem(pytest.Item):
    def __init__(self, *, rule: Rule, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rule = rule

    def runtest(self) -> None:
        opted = self.config.stash[_OPTED]
        result = verify_checked(self.rule, opted.options, opted.helpers, opted.predicates)
        self.user_properties.append(("fxrules_verdict", result.verdict.value))
        if result.proof:
            self.user_properties.append(("fxrules_proof", result.proof))
        self.add_report_section("call", "fxrules", str(result))
        if result.verdict is Verdict.INCONCLUSIVE:
            pytest.skip(f"inconclusive: {result.reason}")
        if result.verdict in (Verdict.UNSOUND, Verdict.ERROR):
            raise FailedRule(str(result))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, FailedRule):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.rule.span.line - 1, self.name


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, Any] | None:
    """A proved rule passes, and says ``PROVED`` in the verbose report line."""
    if report.when == "call" and report.passed and ("fxrules_verdict", Verdict.PROVED.value) in report.user_properties:
        return "passed", ".", ("PROVED", {"green": True})
    return None


class FxrLoadItem(pytest.Item):
    def __init__(self, *, error: FxrError, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        raise self.error

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return str(self.error)


class FailedRule(Exception):  # noqa: N818 - reads as the failure it is
    """A rule is unsound (its pattern and replacement disagree on some input) or cannot run as written."""
