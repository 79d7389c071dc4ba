"""The ``fxrules`` command: check, list, apply, explain.

Most tests call ``fxrules.cli.main([...])`` in-process and read the output with ``capsys``; one runs the installed
console script in a subprocess, as a user would.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import fxrules
from fxrules.cli import first_sentence, main
from fxrules.lang import bundled

GOOD_RULES = """\
rule double_neg:
    torch.neg(torch.neg(x)) => x

rule mul_one:
    x * 1 => x
"""

MODELS = """\
import torch


class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.neg(torch.neg(self.bn(self.conv(x)))) * 1


def make():
    torch.manual_seed(0)
    model = ConvBN()
    model.bn.running_mean.uniform_(-1, 1)
    model.bn.running_var.uniform_(0.5, 2.0)
    return model


class MatmulBias(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 5))
        self.b = torch.nn.Parameter(torch.randn(5))

    def forward(self, x):
        return torch.matmul(x, self.w) + self.b


class NearMisses(torch.nn.Module):
    def forward(self, x):
        return torch.neg(x) * 2 + 0.5


instance = NearMisses()
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh module of small models in a temporary working directory; returns its (unique) module name.

    ``--model`` imports from the working directory.  ``syspath_prepend`` makes monkeypatch restore ``sys.path``
    afterwards (the CLI inserts the cwd itself), and the unique name keeps ``sys.modules`` from serving another
    test's file.
    """
    name = f"cli_models_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(MODELS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def caret_column(output: str, source_line: str) -> int:
    """The 1-based column the caret under ``source_line`` points at, in a printed diagnostic."""
    lines = output.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == source_line.strip() and "^" in lines[i + 1]:
            indent = len(line) - len(line.lstrip())
            source_indent = len(source_line) - len(source_line.lstrip())
            return lines[i + 1].index("^") - indent + source_indent + 1
    raise AssertionError(f"no caret under {source_line!r} in:\n{output}")


# ---------------------------------------------------------------------------------------------------------------------
# check


def test_check_good_file_prints_summary_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "good.fxr", GOOD_RULES)
    assert main(["check", str(rules)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"{rules}: 2 rules, 0 errors"]
    assert "error" not in err


def test_check_bundled_rulesets_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "algebra.fxr", "fusions.fxr"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines() == [
        f"algebra.fxr: {len(fxrules.load('algebra.fxr'))} rules, 0 errors",
        f"fusions.fxr: {len(fxrules.load('fusions.fxr'))} rules, 0 errors",
    ]


def test_check_unknown_target_prints_diagnostic_with_caret_and_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = write(tmp_path / "typo.fxr", """\
        rule ok:
            torch.neg(torch.neg(x)) => x

        rule typo:
            torch.reluu(x) => x
        """)
    assert main(["check", str(rules)]) == 1
    out, err = capsys.readouterr()
    assert out == f"{rules}: 1 error\n", out
    assert f"{rules}:5:11: error: unknown target 'torch.reluu'" in err, err
    assert "    torch.reluu(x) => x" in err
    assert caret_column(err, "    torch.reluu(x) => x") == 11
    assert "did you mean 'torch.relu'?" in err


def test_check_one_mistake_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt target is one error; it must not cascade into claims that are false ('x' IS in the pattern)."""
    rules = write(tmp_path / "typo.fxr", "rule typo:\n    torch.reluu(x) => x\n")
    assert main(["check", str(rules)]) == 1
    out, err = capsys.readouterr()
    assert out == f"{rules}: 1 error\n", err
    assert "is not bound by the pattern" not in err


def test_check_syntax_error_points_at_the_spot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "syntax.fxr", "rule broken:\n    torch.neg(x => x\n")
    assert main(["check", str(rules)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{rules}: ")
    match = re.search(rf"{re.escape(str(rules))}:2:(\d+): error: ", err)
    assert match, err
    column = int(match.group(1))
    assert caret_column(err, "    torch.neg(x => x") == column
    assert column >= len("    torch.neg(x")  # at or after the point where ')' was expected


def test_check_reports_every_error_of_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Design card section 8: errors in one file are all reported at once."""
    rules = write(tmp_path / "two.fxr", """\
        rule first:
            torch.reluu(x) => x

        rule second:
            torch.sigmoidd(x) => x
        """)
    assert main(["check", str(rules)]) == 1
    _, err = capsys.readouterr()
    assert f"{rules}:2:11: error: unknown target 'torch.reluu'" in err
    assert f"{rules}:5:11: error: unknown target 'torch.sigmoidd'" in err


def test_check_several_files_summarises_each_and_fails_if_any_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path / "good.fxr", GOOD_RULES)
    bad = write(tmp_path / "bad.fxr", "rule typo:\n    torch.reluu(x) => x\n")
    assert main(["check", str(bad), str(good)]) == 1
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == f"{bad}: 1 error"
    assert lines[1] == f"{good}: 2 rules, 0 errors"


def test_check_missing_file_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "nowhere.fxr")]) == 1
    _, err = capsys.readouterr()
    assert "nowhere.fxr" in err


# ---------------------------------------------------------------------------------------------------------------------
# list


def test_list_shows_bundled_rulesets_and_their_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out, _ = capsys.readouterr()
    names = bundled.ruleset_names()
    assert {"algebra.fxr", "fusions.fxr"} <= set(names)
    assert "prelude.fxr" not in out  # the prelude holds families, not a ruleset
    headers = [line for line in out.splitlines() if not line.startswith(" ")]
    assert headers == [f"{name}: {len(fxrules.load(name))} rules" for name in names]
    assert len([line for line in out.splitlines() if line.startswith("  ")]) == sum(
        len(fxrules.load(name)) for name in names)
    assert re.search(r"^  double_neg\s+-\(-x\) is x, but for the sign of a complex zero\.$", out, re.MULTILINE)
    assert re.search(r"^  fold_conv2d_bn\s+Conv2d followed by eval-mode BatchNorm2d becomes one Conv2d\.$", out,
                     re.MULTILINE)


def test_list_shows_the_first_sentence_of_a_docstring_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """A sentence that wraps over several docstring lines is printed whole, on one line, and no further."""
    assert main(["list"]) == 0
    out, _ = capsys.readouterr()
    line = next(line for line in out.splitlines() if line.startswith("  clone_single_use "))
    sentence = line.split(maxsplit=1)[1]
    assert sentence.startswith("A clone nothing changes in place, of a computed value nothing else uses, in an "
                               "inference graph, is the value itself")
    assert sentence.endswith(".") and sentence.count(". ") == 0
    assert first_sentence("Fold x.\n\nMore text.") == "Fold x."
    assert first_sentence("x.to(d) when x already has dtype d\nis x. Not for bool.") == \
        "x.to(d) when x already has dtype d is x."


# ---------------------------------------------------------------------------------------------------------------------
# apply and explain


def test_apply_prints_report_and_diff_and_writes_output(
    models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "rewritten.py"
    code = main(["apply", "fusions.fxr", "--model", f"{models}:make", "--input-shape", "1,3,8,8",
                 "--output", str(output)])
    assert code == 0
    out, _ = capsys.readouterr()
    # the report table
    assert re.search(r"^rule\s+fired\s+skipped\s+where$", out, re.MULTILINE), out
    assert re.search(r"^fold_conv2d_bn\s+1\s+0\s+bn$", out, re.MULTILINE), out
    assert re.search(r"^fold_linear_bn\s+0\s+0\s*$", out, re.MULTILINE), out
    assert re.search(r"^1 rewrite in \d+ pass(es)?; nodes \d+ -> \d+", out, re.MULTILINE), out
    # the unified diff of the code
    assert "--- before\n+++ after\n" in out
    assert re.search(r"^@@ -\d+,\d+ \+\d+,\d+ @@", out, re.MULTILINE)
    assert re.search(r"^-    conv = self\.conv\(x\)", out, re.MULTILINE), out
    assert re.search(r"^-    bn = self\.bn\(conv\)", out, re.MULTILINE), out
    assert re.search(r"^\+    \w+ = self\.\w+\(x\)", out, re.MULTILINE), out
    # the rewritten code, as valid Python
    written = output.read_text(encoding="utf-8")
    ast.parse(written)
    assert "def forward(self, x)" in written
    assert "self.bn(" not in written and "self.conv(" not in written
    assert "torch.neg" in written  # fusions.fxr does not touch the algebra


def test_apply_bundled_algebra_without_shapes(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Untyped rules fire without shapes; dtype-typed ones (mul_one: a bool x * 1 is not x) are skipped."""
    assert main(["apply", "algebra.fxr", "--model", f"{models}:make"]) == 0
    out, _ = capsys.readouterr()
    assert re.search(r"^double_neg\s+1\s", out, re.MULTILINE), out
    assert re.search(r"^mul_one\s+0\s+1\s", out, re.MULTILINE), out
    assert "skipped mul_one x1 (missing metadata)" in out
    assert re.search(r"^-    neg = torch\.neg\(bn\)", out, re.MULTILINE), out


def test_apply_user_rule_file_to_a_module_class(
    models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RULES may be a path; --model may name an nn.Module class (instantiated) or an instance."""
    rules = write(tmp_path / "mine.fxr", "rule mul_two: x * 2 => x + x\n")
    assert main(["apply", str(rules), "--model", f"{models}:NearMisses"]) == 0
    out, _ = capsys.readouterr()
    assert re.search(r"^mul_two\s+1\s", out, re.MULTILINE), out
    assert re.search(r"^\+.* = neg \+ neg", out, re.MULTILINE), out

    assert main(["apply", str(rules), "--model", f"{models}:instance"]) == 0
    out, _ = capsys.readouterr()
    assert re.search(r"^mul_two\s+1\s", out, re.MULTILINE), out


def test_apply_input_shapes_provide_metadata(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled addmm rule needs shapes: skipped (and said so) without --input-shape, fired with it."""
    assert main(["apply", "fusions.fxr", "--model", f"{models}:MatmulBias"]) == 0
    out, _ = capsys.readouterr()
    assert re.search(r"^addmm\s+0\s+1\s", out, re.MULTILINE), out
    assert "missing metadata" in out

    assert main(["apply", "fusions.fxr", "--model", f"{models}:MatmulBias", "--input-shape", "3,4"]) == 0
    out, _ = capsys.readouterr()
    assert re.search(r"^addmm\s+1\s", out, re.MULTILINE), out
    assert re.search(r"^\+.*torch\.addmm\(b, x, w\)", out, re.MULTILINE), out


def test_apply_with_a_bad_rule_file_exits_1(
    models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = write(tmp_path / "typo.fxr", "rule typo:\n    torch.reluu(x) => x\n")
    assert main(["apply", str(rules), "--model", f"{models}:make"]) == 1
    _, err = capsys.readouterr()
    assert f"{rules}:2:11: error: unknown target 'torch.reluu'" in err


def test_apply_with_a_malformed_model_spec_exits_with_message(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "algebra.fxr", "--model", models]) == 2
    assert capsys.readouterr().err == (f"fxrules apply: error: --model '{models}': write package.module:factory "
                                       "(or :instance)\n")


def test_apply_with_an_unimportable_model_is_a_clean_error(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A user mistake on the command line gets a message and a non-zero exit, not a Python traceback."""
    try:
        code = main(["apply", "algebra.fxr", "--model", "no_such_module_here:make"])
    except SystemExit as exit_info:
        code = exit_info.code
    except ModuleNotFoundError as error:
        pytest.fail(f"the CLI let {error!r} escape as a traceback")
    out, err = capsys.readouterr()
    assert code not in (0, None)
    assert "no_such_module_here" in (str(code) + out + err)


def test_explain_prints_near_misses_with_rule_locations(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "algebra.fxr", "--model", f"{models}:NearMisses", "--input-shape", "2,3"]) == 0
    out, _ = capsys.readouterr()
    assert re.search(r"^0 rewrites in", out, re.MULTILINE), out
    misses = [line for line in out.splitlines() if line.startswith("  near miss ")]
    assert any(re.match(r"  near miss mul_one at mul: literal: expected 1, found 2 \(.*algebra\.fxr:\d+:\d+\)$", m)
               for m in misses), out
    assert any(re.match(r"  near miss add_negative_zero at add: literal: .*0\.5 \(.*algebra\.fxr:\d+:\d+\)$", m)
               for m in misses), out

    # apply (without explain) on the same model records no near misses
    assert main(["apply", "algebra.fxr", "--model", f"{models}:NearMisses"]) == 0
    out, _ = capsys.readouterr()
    assert "near miss" not in out


# ---------------------------------------------------------------------------------------------------------------------
# the installed console script


def _console_script() -> str:
    beside = Path(sys.executable).with_name("fxrules")
    found = str(beside) if beside.exists() else shutil.which("fxrules")
    if found is None:
        pytest.fail("the 'fxrules' console script is not installed (pip install -e .[test])")
    return found


def test_console_script_apply_in_a_subprocess(tmp_path: Path) -> None:
    """The entry point works end to end, and --model imports from the working directory of a real process."""
    name = "cli_models_subprocess"
    (tmp_path / f"{name}.py").write_text(MODELS, encoding="utf-8")
    output = tmp_path / "out.py"
    result = subprocess.run(
        [_console_script(), "apply", "algebra.fxr", "--model", f"{name}:make", "--input-shape", "1,3,8,8",
         "--output", str(output)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"^double_neg\s+1\s", result.stdout, re.MULTILINE), result.stdout
    assert "--- before\n+++ after\n" in result.stdout
    assert "torch.neg" not in output.read_text(encoding="utf-8")


def test_python_dash_m_runs_the_same_command(tmp_path: Path) -> None:
    """``python -m fxrules`` is the console script: same commands, same exit codes."""
    good = tmp_path / "good.fxr"
    good.write_text("rule double_neg:\n    torch.neg(torch.neg(x)) => x\n", encoding="utf-8")
    bad = tmp_path / "bad.fxr"
    bad.write_text("rule oops:\n    torch.nosuch(x) => x\n", encoding="utf-8")
    ok = subprocess.run([sys.executable, "-m", "fxrules", "check", str(good)],
                        capture_output=True, text=True, timeout=300, check=False)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"{good}: 1 rule, 0 errors\n"
    failed = subprocess.run([sys.executable, "-m", "fxrules", "check", str(bad)],
                            capture_output=True, text=True, timeout=300, check=False)
    assert failed.returncode == 1
    assert failed.stdout == f"{bad}: 1 error\n"
    assert f"{bad}:2:11: error: unknown target 'torch.nosuch'" in failed.stderr


def test_allow_lets_check_and_verify_reach_a_module_the_rules_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rule file that needs ``allow=`` can be checked and verified from the command line too."""
    rules = write(tmp_path / "cm.fxr", """\
        @finite_inputs()
        rule scale_back:
            given:
                x: Tensor[dtype=float32]
            pattern:
                return torch.neg(torch.neg(x))
            replace:
                return x * cmath.e / cmath.e
        """)
    assert main(["check", str(rules)]) == 1
    _, err = capsys.readouterr()
    assert f"{rules}:8:20: error: 'cmath' is not bound by the pattern" in err
    assert "hint: or, for the module 'cmath', pass allow=['cmath']" in err
    assert main(["check", "--allow", "cmath", str(rules)]) == 0
    out, _ = capsys.readouterr()
    assert out == f"{rules}: 1 rule, 0 errors\n"
    # a solver time limit no loaded machine reaches: the line pinned is the prover's answer, not its timeout
    assert main(["verify", "--allow", "cmath", "--examples", "20", "--seed", "1", "--prove-timeout", "120",
                 str(rules)]) == 0
    out, _ = capsys.readouterr()
    assert out == (f"{rules}:2:6: scale_back: sound (20 examples)\n"
                   "  the prover: refuted: the solver found the outputs differ (x: float32); its counterexample is "
                   "not an input of the moderate finite size @finite_inputs() claims\n"
                   "1 rule: 1 sound, 0 unsound, 0 inconclusive, 0 errors (seed 1)\n")
