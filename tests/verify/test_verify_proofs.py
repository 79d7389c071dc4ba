"""verify with the prover: a rule whose values are proved (and sound on the examples) is ``proved`` with the
dtypes the proof covers, a refutation that verify's own checks confirm is ``unsound`` with a counterexample
that reproduces on tensors, a rule outside the prover's subset is sampled as before, and without z3 (or with
``prove=False``) verify reports exactly what sampling alone reports; the same on the command line, in JSON and
in the pytest plugin."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import fxrules
from fxrules.cli import main
from fxrules.verification.soundness import Verdict

pytest.importorskip("z3")

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

#: Provable for the dtypes its type declares.
NEG_NEG = ("rule neg_neg:\n    given:\n        x: Tensor[..., dtype=float32|float64]\n"
           "    pattern:\n        return torch.neg(torch.neg(x))\n    replace:\n        return x\n")
#: Wrong on -0.0 only: -0.0 + 0.0 is 0.0.
ADD_ZERO = ("rule add_zero:\n    given:\n        x: Tensor[..., dtype=float32]\n"
            "    pattern:\n        return torch.add(x, 0.0)\n    replace:\n        return x\n")
#: Sound, and outside the prover's subset (a reduction).
MATMUL = "rule matmul_as_operator: torch.matmul(a, b) => a @ b\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_provable_rule_is_proved_for_the_dtypes_the_proof_covers() -> None:
    rules = fxrules.parse(NEG_NEG, filename="neg.fxr")
    verdict = fxrules.verify(rules, max_examples=20)["neg_neg"]
    assert verdict.verdict is Verdict.PROVED
    assert verdict.proved == fxrules.prove(rules)["neg_neg"].dtypes == ("x: float32|float64",)
    assert verdict.examples == 20  # the examples still ran, for what the proof does not cover
    assert str(verdict).startswith("neg.fxr:1:6: neg_neg: proved (x: float32|float64), sound (20 examples; "
                                   "aliasing changes: output 0 is input x")
    assert verdict.proof == "proved (dtypes x: float32|float64)"


def test_a_proved_rule_counts_as_sound_and_the_summary_says_how_many_were_proved() -> None:
    report = fxrules.verify(fxrules.parse(NEG_NEG + MATMUL), max_examples=20)
    assert report.sound
    assert str(report).endswith("\n2 rules: 2 sound (1 proved), 0 unsound, 0 inconclusive, 0 errors (seed 0)")


def test_a_wrong_provable_rule_is_unsound_with_the_provers_counterexample_which_reproduces_on_tensors(
        tmp_path: Path) -> None:
    path = write(tmp_path / "add_zero.fxr", ADD_ZERO)
    verdict = fxrules.verify(path, max_examples=20)["add_zero"]
    assert verdict.verdict is Verdict.UNSOUND
    assert verdict.examples == 0  # nothing sampled: the prover's input settles it
    assert verdict.counterexample is not None and verdict.counterexample.found_by_prover
    assert verdict.counterexample.inputs == ("x: Tensor[1] torch.float32 = [-0.0]",)
    assert verdict.proof.startswith("refuted: ")
    assert "\n  found by the prover: refuted: " in str(verdict)
    namespace: dict[str, Any] = {}
    exec(verdict.counterexample.reproduction.replace("print(", "outputs = ("), namespace)
    pattern, replacement = namespace["outputs"]
    assert pattern.tolist() == replacement.tolist() == [0.0]
    assert (pattern.signbit().tolist(), replacement.signbit().tolist()) == ([False], [True])


#: Wrong for a float x (trunc(0.5) is 0.0), right for an integer x.
TRUNC_ONE = ("rule trunc_one:\n    given:\n        x: Tensor[dtype=int32|float32]\n"
             "    pattern:\n        return torch.div(x, 1, rounding_mode='trunc')\n"
             "    replace:\n        return x.clone()\n")


def test_a_refutation_on_a_dtype_verify_is_not_asked_to_draw_leaves_the_verdict_to_the_examples() -> None:
    """dtypes= says which dtypes verify draws: a prover counterexample of another dtype is not reported, and
    verify says what sampling alone says; with that dtype among them, the counterexample makes it unsound."""
    rules = fxrules.parse(TRUNC_ONE, filename="trunc.fxr")
    proving, sampling = (fxrules.verify(rules, max_examples=20, dtypes="int32", prove=prove) for prove in (True, False))
    assert str(sampling) == ("trunc.fxr:1:6: trunc_one: sound (20 examples)\n"
                             "1 rule: 1 sound, 0 unsound, 0 inconclusive, 0 errors (seed 0)")
    assert str(proving) == ("trunc.fxr:1:6: trunc_one: sound (20 examples)\n"
                            "  the prover: refuted: the solver found the outputs differ (x: float32); its "
                            "counterexample has a dtype verify was not asked to draw\n"
                            "1 rule: 1 sound, 0 unsound, 0 inconclusive, 0 errors (seed 0)")
    assert proving["trunc_one"].proof.startswith("refuted: the solver found the outputs differ (x: float32)")
    verdict = fxrules.verify(rules, max_examples=20, dtypes="float32")["trunc_one"]
    assert verdict.verdict is Verdict.UNSOUND
    assert verdict.counterexample is not None and verdict.counterexample.found_by_prover


#: Wrong in the last bit for a subnormal float16 x (x * 0.5 rounds), within verify's tolerance.
HALF_DOUBLE = ("rule half_double:\n    given:\n        x: Tensor[dtype=float16]\n"
               "    pattern:\n        return x * 0.5 * 2.0\n    replace:\n        return x.clone()\n")


def test_a_refutation_within_the_tolerance_leaves_the_verdict_to_the_examples_and_says_so() -> None:
    """The prover's counterexample differs only within the rule's tolerance: the rule is sound on the examples,
    and its text says what the prover found and why verify did not confirm it (the JSON has it too)."""
    report = fxrules.verify(fxrules.parse(HALF_DOUBLE, filename="half.fxr"), max_examples=20)
    assert str(report) == ("half.fxr:1:6: half_double: sound (20 examples)\n"
                           "  the prover: refuted: the solver found the outputs differ (x: float16); verify's checks "
                           "find no difference on its counterexample (the outputs differ within the rule's "
                           "tolerance)\n"
                           "1 rule: 1 sound, 0 unsound, 0 inconclusive, 0 errors (seed 0)")
    assert json.loads(report.to_json())["rules"][0]["unconfirmed"].startswith("verify's checks find no difference")


def test_a_rule_outside_the_provers_subset_is_sound_on_examples_as_without_the_prover() -> None:
    rules = fxrules.parse(MATMUL, filename="mm.fxr")
    proving, sampling = (fxrules.verify(rules, max_examples=20, prove=prove) for prove in (True, False))
    verdict = proving["matmul_as_operator"]
    assert verdict.verdict is Verdict.SOUND
    assert str(verdict) == str(sampling["matmul_as_operator"]) == "mm.fxr:1:6: matmul_as_operator: sound (20 examples)"
    assert verdict.proof.startswith("not provable here: ")
    assert sampling["matmul_as_operator"].proof == ""


def test_prove_false_only_samples() -> None:
    report = fxrules.verify(fxrules.parse(NEG_NEG), max_examples=20, prove=False)
    assert report["neg_neg"].verdict is Verdict.SOUND
    assert not report.proving
    assert str(report).endswith("\n1 rule: 1 sound, 0 unsound, 0 inconclusive, 0 errors (seed 0)")


def test_the_solver_timeout_reaches_the_prover() -> None:
    verdict = fxrules.verify(fxrules.parse(NEG_NEG), max_examples=20, prove_timeout=1e-9)["neg_neg"]
    assert verdict.verdict is Verdict.SOUND
    assert verdict.proof == "not provable here: timeout"


def test_json_carries_the_proof(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", NEG_NEG + MATMUL)
    assert main(["verify", str(rules), "--examples", "20", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["proving"] is True
    assert [(r["rule"], r["verdict"], r["proved"]) for r in data["rules"]] == [
        ("neg_neg", "proved", ["x: float32|float64"]), ("matmul_as_operator", "sound", [])]
    assert data["rules"][1]["proof"].startswith("not provable here: ")


@pytest.mark.parametrize(("options", "message"), [
    ({"prove_timeout": 0}, "prove_timeout must be a positive number of seconds, got 0"),
    ({"prove_timeout": "soon"}, "prove_timeout must be a positive number of seconds, got 'soon'"),
    ({"prove": "no"}, "prove must be True or False, got 'no'"),
])
def test_bad_proving_options_of_the_python_api(options: dict[str, Any], message: str) -> None:
    with pytest.raises(fxrules.FxrUsageError) as raised:
        fxrules.verify(fxrules.parse(NEG_NEG), **options)
    assert str(raised.value) == message


def test_a_bad_solver_timeout_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", NEG_NEG)
    with pytest.raises(SystemExit) as exited:
        main(["verify", str(rules), "--prove-timeout", "-1"])
    assert exited.value.code == 2
    assert "argument --prove-timeout: must be a positive number of seconds, got '-1'" in capsys.readouterr().err


# ---------------------------------------------------------------- without z3


def _without_z3(*arguments: str, cwd: Path) -> str:
    """The command line's output in a fresh process where z3 cannot be imported."""
    script = ("import sys\nsys.modules['z3'] = None  # import z3 raises ImportError\n"
              "from fxrules.cli import main\nraise SystemExit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", script, *arguments], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_without_z3_verify_reports_what_sampling_alone_reports(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", NEG_NEG + MATMUL)
    arguments = ["verify", str(rules), "--examples", "20"]
    assert main([*arguments, "--no-prove"]) == 0
    sampled = capsys.readouterr().out
    assert _without_z3(*arguments, cwd=tmp_path) == sampled
    assert sampled.endswith("2 rules: 2 sound, 0 unsound, 0 inconclusive, 0 errors (seed 0)\n")
    data = json.loads(_without_z3(*arguments, "--json", cwd=tmp_path))
    assert data["proving"] is False
    assert [(r["verdict"], r["proof"]) for r in data["rules"]] == [("sound", ""), ("sound", "")]


# ---------------------------------------------------------------- Ctrl-C


#: True, and seconds of solver time for each of its 16 configurations (four float64 divisions to bit-blast): the
#: prover is in z3 for most of the time the test waits.
TIMES_ONE = ("rule times_one:\n    given:\n" + "".join(f"        {name}: Tensor[dtype=float64]\n" for name in "xyzw")
             + "    pattern:\n        return ((x / y) / (z / w)) * 1.0\n"
             + "    replace:\n        return (x / y) / (z / w)\n")


def test_ctrl_c_while_the_solver_runs_stops_verify() -> None:
    """z3 takes the SIGINT that arrives while it solves and answers "unknown": verify stops with
    KeyboardInterrupt, as it does when Ctrl-C arrives while it samples, rather than going on to the examples."""
    script = ("import sys, fxrules\nrules = fxrules.parse(sys.argv[1])\nprint('proving', flush=True)\n"
              "print(fxrules.verify(rules, max_examples=5, prove_timeout=120))\n")
    with subprocess.Popen([sys.executable, "-c", script, TIMES_ONE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == "proving\n"
        time.sleep(2)  # into the solver: torch's runs of each configuration take milliseconds
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGINT, err  # as Python exits on an uncaught KeyboardInterrupt
    assert err.splitlines()[-1] == "KeyboardInterrupt"
    assert out == ""


# ---------------------------------------------------------------- the pytest plugin


def test_plugin_reports_a_proved_rule_as_passed_and_proved(pytester: pytest.Pytester) -> None:
    write(pytester.path / "rules.fxr", NEG_NEG + MATMUL)
    result = pytester.runpytest("--fxrules", "rules.fxr", "--fxrules-examples", "20", "-v", "-rP",
                                "--junitxml=report.xml")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["fxrules: rules under *rules.fxr (seed 0, proving with z3)",
                                 "*rules.fxr::neg_neg PROVED*", "*rules.fxr::matmul_as_operator PASSED*"])
    result.stdout.fnmatch_lines(["*rules.fxr:1:6: neg_neg: proved (x: float32|float64), sound (20 examples*"])
    junit = (pytester.path / "report.xml").read_text()
    assert '<property name="fxrules_verdict" value="proved" />' in junit
    assert '<property name="fxrules_proof" value="proved (dtypes x: float32|float64)" />' in junit


def test_plugin_ini_option_turns_proving_off(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfxrules_prove = false\nfxrules_examples = 20\n")
    write(pytester.path / "rules.fxr", NEG_NEG)
    result = pytester.runpytest("--fxrules", "rules.fxr", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["fxrules: rules under *rules.fxr (seed 0)", "*rules.fxr::neg_neg PASSED*"])
    flagged = pytester.runpytest("--fxrules", "rules.fxr", "--fxrules-no-prove", "-p", "no:cacheprovider", "-v",
                                 "-o", "fxrules_prove=true")
    flagged.stdout.fnmatch_lines(["*rules.fxr::neg_neg PASSED*"])


@pytest.mark.parametrize(("arguments", "ini", "message"), [
    (["--fxrules-prove-timeout", "0"], "",
     "ERROR: --fxrules-prove-timeout: prove_timeout must be a positive number of seconds, got '0'"),
    ([], "fxrules_prove = maybe\n", "ERROR: ini option fxrules_prove: must be true or false, got 'maybe'"),
])
def test_plugin_refuses_bad_proving_options(pytester: pytest.Pytester, arguments: list[str], ini: str,
                                            message: str) -> None:
    pytester.makeini("[pytest]\n" + ini)
    result = pytester.runpytest(*arguments)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()

