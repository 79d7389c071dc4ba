"""pytest plugin: every rule of every ``.fxr`` file under the test paths is a test item.

``pytest rulesets/`` collects ``algebra.fxr::double_neg`` and so on; an
unsound rule fails with its counterexample, an inconclusive one is skipped
with the reason.  ``-k``, ``-x`` and ``--hypothesis-seed`` work as usual;
``--fxrules-examples N`` sets the number of examples per rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fxrules.diagnostics import FxrError
from fxrules.ir import Rule
from fxrules.loader import load
from fxrules.verification import Verdict, verify_rule


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fxrules")
    group.addoption("--fxrules-examples", type=int, default=100, help="hypothesis examples per .fxr rule")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".fxr" and file_path.name != "prelude.fxr":
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
        examples = self.config.getoption("--fxrules-examples")
        seed = self.config.getoption("hypothesis_seed", None)
        result = verify_rule(self.rule, max_examples=examples, seed_value=int(seed) if seed is not None else None)
        if result.verdict is Verdict.INCONCLUSIVE:
            pytest.skip(f"inconclusive: {result.reason}")
        if result.verdict is Verdict.UNSOUND:
            raise UnsoundRule(str(result))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, UnsoundRule):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.rule.span.line - 1, self.name


class FxrLoadItem(pytest.Item):
    def __init__(self, *, error: FxrError, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        raise self.error

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return str(self.error)


class UnsoundRule(Exception):  # noqa: N818 - reads as the failure it is
    """A rule's pattern and replacement disagree on some input."""
