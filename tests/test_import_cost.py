"""What importing fxrules and loading a rule file pull in: the layers of docs/internals.md, observed."""

from __future__ import annotations

import gc
import io
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch._dynamo", "torch._inductor", "hypothesis")


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    finished = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(finished.stdout.split())


def test_import_fxrules_imports_neither_torch_nor_dynamo_nor_hypothesis() -> None:
    loaded = modules_after("import fxrules")
    assert "torch" not in loaded
    assert not loaded & set(HEAVY)


def test_loading_and_applying_rules_imports_no_compiler_and_no_hypothesis() -> None:
    loaded = modules_after(
        "import torch, fxrules\n"
        "gm = torch.fx.symbolic_trace(lambda x: torch.relu(torch.relu(x)))\n"
        "report = fxrules.apply(gm, fxrules.parse('rule r: torch.relu(torch.relu(x)) => torch.relu(x)'))\n"
        "assert report.counts() == {'r': 1}, report.counts()")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_language_layer_loads_a_rule_file_without_the_matcher_or_the_rewriter() -> None:
    loaded = modules_after("from fxrules.lang import loader\nloader.load('algebra.fxr')")
    assert "fxrules.lang.ir" in loaded
    assert not {name for name in loaded if name.startswith(("fxrules.match", "fxrules.rewrite", "fxrules.engine"))}


#: What the commands that only read rule files leave alone: the rewriting driver, verification, the model
#: tools, and sympy (torch's symbolic shapes).
NOT_FOR_READING = (*HEAVY, "sympy", "torch.fx.experimental.symbolic_shapes", "fxrules.engine.driver",
                   "fxrules.verification", "fxrules.integrations")


def command_modules(arguments: str) -> set[str]:
    """The modules a fresh interpreter has imported after running ``fxrules ARGUMENTS`` (exit status 0)."""
    return modules_after(f"from fxrules.cli import main\nassert main({arguments.split()!r}) == 0")


def test_fxrules_check_and_list_load_rules_without_the_driver_verification_or_sympy() -> None:
    for arguments in ("check algebra.fxr cleanup.fxr", "list"):
        loaded = command_modules(arguments)
        assert "fxrules.engine.loading" in loaded
        assert not loaded & set(NOT_FOR_READING), (arguments, sorted(loaded & set(NOT_FOR_READING)))


def test_fxrules_fmt_imports_neither_the_matcher_nor_the_loop_check(tmp_path: Path) -> None:
    path = tmp_path / "r.fxr"
    path.write_text("rule r: torch.relu(torch.relu(x)) => torch.relu(x)\n", encoding="utf-8")
    loaded = command_modules(f"fmt --check {path}")
    assert "fxrules.lang.formatting" in loaded
    assert not {name for name in loaded if name.startswith(("fxrules.match", "fxrules.rewrite", "fxrules.engine"))}
    assert not loaded & set(NOT_FOR_READING)


def test_loading_a_rule_file_imports_no_sympy() -> None:
    loaded = modules_after("import fxrules\nfxrules.load('algebra.fxr')")
    assert not loaded & {"sympy", "torch.fx.experimental.symbolic_shapes"}



def test_loading_rules_leaves_the_optional_regex_package_unloaded_and_working() -> None:
    """Lark imports ``regex`` when it is installed, which our grammar never uses: loading a rule file leaves it
    unexecuted (a lazy module), and Lark's ``regex=True``, and ``regex`` itself, still work afterwards."""
    pytest.importorskip("regex")
    after = modules_after("import fxrules, sys\nfxrules.load('algebra.fxr')\n"
                          "assert 'regex._regex_core' not in sys.modules\n"
                          "import lark, regex\nassert regex.compile('a+').match('aa')\n"
                          "tree = lark.Lark(r'start: /\\p{L}+/', regex=True).parse('fx')\n"
                          "assert tree.children[0] == 'fx', tree")
    assert {"lark", "regex", "regex._regex_core"} <= after


class _CollectorWatch(io.StringIO):
    """Standard output that notes whether the garbage collector was on at each write."""

    def __init__(self) -> None:
        super().__init__()
        self.enabled: list[bool] = []

    def write(self, text: str) -> int:
        self.enabled.append(gc.isenabled())
        return super().write(text)


def test_fxrules_check_runs_with_the_garbage_collector_paused_and_turns_it_back_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`check` pauses the garbage collector from start to end (each collection would scan torch's objects for
    nothing), not only while a file loads: it is off when the summary lines are printed, and on afterwards."""
    from fxrules.cli import main

    path = tmp_path / "r.fxr"
    path.write_text("rule r: torch.relu(torch.relu(x)) => torch.relu(x)\n", encoding="utf-8")
    watch = _CollectorWatch()
    monkeypatch.setattr(sys, "stdout", watch)
    assert gc.isenabled()
    assert main(["check", "algebra.fxr", str(path)]) == 0
    assert watch.getvalue() == f"algebra.fxr: 27 rules, 0 errors\n{path}: 1 rule, 0 errors\n"
    assert watch.enabled and not any(watch.enabled)
    assert gc.isenabled()
