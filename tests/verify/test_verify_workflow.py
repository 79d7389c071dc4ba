"""How verify is run: seeded and reproducible by default, no files written, its options on the Python API, the
command line and the pytest plugin (with their exact error texts), and the plugin collecting only what a project
opts in."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import torch

import fxrules
from fxrules.cli import main
from fxrules.verification.soundness import Verdict
from fxrules.verification.strategies import Example, examples

pytest_plugins = ["pytester"]

UNSOUND = "rule relu_is_abs: torch.relu(x) => torch.abs(x)\n"
TWO_RULES = "rule double_neg: torch.neg(torch.neg(x)) => x\nrule relu_is_abs: torch.relu(x) => torch.abs(x)\n"
KNOWN_DTYPES = ("bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, complex64, "
                "complex128")


def spying_rule() -> tuple[fxrules.RuleSet, dict[str, Callable[..., Any]], list[tuple[tuple[int, ...], torch.dtype]]]:
    """A sound rule whose helper records the shape and dtype of every input the replacement is built for."""
    seen: list[tuple[tuple[int, ...], torch.dtype]] = []

    def zero(x: Any) -> int:
        seen.append((tuple(x.shape), x.dtype))
        return 0

    rules = fxrules.parse("rule spy: torch.neg(torch.neg(x)) => x - @zero(x)\n", filename="spy.fxr")  # x + 0 loses -0.0
    return rules, {"zero": zero}, seen


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- determinism and the seed


def test_every_example_runs_the_one_pattern_graph_on_its_own_buffers() -> None:
    """The pattern graph is built once per rule and shared by every drawn example, yet each example's output is
    computed from that example's own buffers (a tensor a helper reads is a buffer of the graph's root)."""
    rule = fxrules.parse("rule add_buffer:\n    given:\n        s: Tensor[N]\n    pattern:\n        return "
                         "torch.add(x, s)\n    replace:\n        return x + @zero(s)\n")["add_buffer"]
    drawn: list[Example] = []

    @hypothesis.settings(max_examples=30, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(examples(rule))
    def outputs_come_from_the_examples_own_buffer(example: Example) -> None:
        assert example.attributes == ("s",)
        computed = torch.add(example.values["x"], example.values["s"])
        torch.testing.assert_close(example.expected, computed, rtol=0, atol=0, equal_nan=True)
        drawn.append(example)

    outputs_come_from_the_examples_own_buffer()
    assert len(drawn) >= 10
    assert len({id(example.values["s"]) for example in drawn}) == len(drawn)
    assert all(example.pattern is drawn[0].pattern for example in drawn)



def test_two_runs_print_the_same_report_with_the_same_counterexample(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", TWO_RULES)
    outputs = []
    for _ in range(2):
        assert main(["verify", str(rules), "--examples", "30", "--no-prove"]) == 1
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert "relu_is_abs: unsound: values differ beyond tolerance" in outputs[0]
    assert "  counterexample:\n    x: Tensor[" in outputs[0]


def test_the_summary_prints_the_seed_default_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", TWO_RULES)
    main(["verify", str(rules), "--examples", "20", "--no-prove"])
    assert capsys.readouterr().out.endswith("2 rules: 1 sound, 1 unsound, 0 inconclusive, 0 errors (seed 0)\n")
    main(["verify", str(rules), "--examples", "20", "--seed", "7", "--no-prove"])
    assert capsys.readouterr().out.endswith("(seed 7)\n")
    assert fxrules.verify(rules, max_examples=20).seed == 0


def test_the_same_seed_draws_the_same_inputs_and_another_seed_others() -> None:
    rules, helpers, seen = spying_rule()
    draws = []
    for seed in (0, 0, 1):
        seen.clear()
        assert fxrules.verify(rules, max_examples=25, seed=seed, helpers=helpers).sound
        draws.append(list(seen))
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]


#: A module of the caller's own, with numbers hypothesis would mix into what it draws if it read them.
UNUSUAL_CONSTANTS = ('"""Numbers of a project of its own."""\nA = 1234.5678\n'
                     "B = (0.5, 2.5, 0.125, -3.75, 1.75, 3.25, 40000, 12345, 54321, 777, 31337, 2024, 65000)\n")
#: Prints a digest of every input verify draws for a rule (the values, through a helper that reads them).
DRAW_DIGEST = """
import hashlib, sys
import fxrules
if "--import-first" in sys.argv:
    import unusual_constants  # noqa: F401
seen = []
def zero(x):
    value = x.node.meta["val"]
    seen.append((str(value.dtype), tuple(value.shape), repr(value.tolist())))
    return 0
rules = fxrules.parse("rule spy: torch.neg(torch.neg(x)) => x - @zero(x)\\n", filename="spy.fxr")
assert fxrules.verify(rules, max_examples=200, helpers={"zero": zero}, prove=False).sound
print(len(seen), hashlib.sha256(repr(seen).encode()).hexdigest())
"""


def _draw_digest(directory: Path, *arguments: str) -> str:
    done = subprocess.run([sys.executable, "draws.py", *arguments], cwd=directory, capture_output=True, text=True,
                          env={"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"},
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_drawn_inputs_do_not_depend_on_the_callers_modules(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The same rule and seed draw the same inputs in a script, after the script imports a module of its own
    with unusual numbers, and under pytest (hypothesis on its own mixes such numbers into its draws)."""
    write(tmp_path / "unusual_constants.py", UNUSUAL_CONSTANTS)
    write(tmp_path / "draws.py", DRAW_DIGEST)
    plain, after_import = _draw_digest(tmp_path), _draw_digest(tmp_path, "--import-first")
    assert plain == after_import
    assert plain.startswith("200 ")
    exec(DRAW_DIGEST, {"__name__": "draws_under_pytest"})  # here, with pytest's and this suite's modules imported
    assert capsys.readouterr().out == plain


def test_verify_leaves_hypothesis_reading_the_callers_modules_for_the_callers_own_tests() -> None:
    """verify turns hypothesis's local constants off only while it runs: the caller's own hypothesis tests
    keep them."""
    providers = pytest.importorskip("hypothesis.internal.conjecture.providers")
    before = (providers._get_local_constants, providers.CONSTANTS_CACHE)
    fxrules.verify(fxrules.parse(UNSOUND), max_examples=5, prove=False)
    assert (providers._get_local_constants, providers.CONSTANTS_CACHE) == before


def test_verify_runs_when_hypothesis_internals_it_pins_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should a later hypothesis rename the function verify pins, verify still runs (unpinned); the test above of
    drawn inputs then says the draws depend on the caller's modules again."""
    providers = pytest.importorskip("hypothesis.internal.conjecture.providers")
    monkeypatch.delattr(providers, "_get_local_constants")  # a hypothesis that reads local constants otherwise:
    monkeypatch.setattr(providers.HypothesisProvider, "_local_constants", property(lambda _: providers.Constants()))
    report = fxrules.verify(fxrules.parse(UNSOUND), max_examples=20, prove=False)
    assert report["relu_is_abs"].verdict is Verdict.UNSOUND


def test_verify_calls_overlapping_in_threads_put_back_the_callers_settings() -> None:
    """verify runs torch on one thread and keeps hypothesis's files in a directory of its own while any call is
    inside, and silences torch's warnings: when calls overlap in two threads (the first in is out first), the
    caller's thread count, hypothesis directory and warning filters are back after both, not the other call's (a
    deleted temporary directory, every warning ignored)."""
    home = "__hypothesis_home_directory"  # hypothesis's private global, which set_hypothesis_home_dir sets
    before = (torch.get_num_threads(), getattr(hypothesis.configuration, home, None), list(warnings.filters))
    first_inside, second_inside, first_done = threading.Event(), threading.Event(), threading.Event()

    def first_waits(_: object) -> bool:
        first_inside.set()
        return second_inside.wait(60)

    def second_waits(_: object) -> bool:
        second_inside.set()
        return first_done.wait(60)

    def run(gate: Callable[[object], bool], done: threading.Event | None = None) -> None:
        rule = fxrules.parse("rule gated:\n    pattern:\n        return torch.relu(x)\n    where:\n        gate(x)\n"
                             "    replace:\n        return torch.clamp_min(x, 0)\n")
        fxrules.verify(rule, max_examples=2, predicates={"gate": gate})
        if done is not None:
            done.set()

    torch.set_num_threads(2)
    try:
        first = threading.Thread(target=run, args=(first_waits, first_done))
        second = threading.Thread(target=run, args=(second_waits,))
        first.start()
        assert first_inside.wait(60)
        second.start()
        first.join(60)
        second.join(60)
        assert first_done.is_set() and not second.is_alive()
        assert (torch.get_num_threads(), getattr(hypothesis.configuration, home, None)) == (2, before[1])
        assert warnings.filters == before[2]
    finally:
        torch.set_num_threads(before[0])


def test_json_output_carries_the_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", TWO_RULES)
    assert main(["verify", str(rules), "--examples", "20", "--seed", "3", "--json", "--no-prove"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["seed"] == 3
    assert [(r["rule"], r["verdict"]) for r in data["rules"]] == [("double_neg", "sound"), ("relu_is_abs", "unsound")]


def test_verify_writes_no_file_in_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", UNSOUND)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["verify", str(rules), "--examples", "20"]) == 1
    assert not fxrules.verify(rules, max_examples=20).sound
    assert list(work.iterdir()) == []


def test_a_fresh_process_verifying_writes_no_file_in_the_working_directory(tmp_path: Path) -> None:
    """Hypothesis caches what it reads of the caller's modules under ``.hypothesis/`` in the working directory,
    once per process: a new process running ``fxrules verify`` leaves that directory as it found it."""
    rules = write(tmp_path / "rules.fxr", UNSOUND)
    work = tmp_path / "work"
    work.mkdir()
    finished = subprocess.run([sys.executable, "-m", "fxrules", "verify", str(rules), "--examples", "5"], cwd=work,
                              capture_output=True, text=True, timeout=300, check=False)
    assert finished.returncode == 1, finished.stderr
    assert list(work.iterdir()) == []


def test_a_database_directory_keeps_the_failing_input_and_nothing_else_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = write(tmp_path / "rules.fxr", UNSOUND)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    first = fxrules.verify(rules, max_examples=20, database="db", prove=False)  # the prover's input saves nothing
    assert [p.name for p in work.iterdir()] == ["db"]
    assert any(p.is_file() for p in (work / "db").rglob("*"))  # the shrunk failing input
    again = fxrules.verify(rules, max_examples=20, database="db", prove=False)
    assert [(r.verdict, r.reason) for r in again.results] == [(r.verdict, r.reason) for r in first.results]
    assert first["relu_is_abs"].verdict is Verdict.UNSOUND


# ---------------------------------------------------------------- each option, on the API and the command line


def test_max_side_bounds_every_drawn_dim() -> None:
    rules, helpers, seen = spying_rule()
    fxrules.verify(rules, max_examples=40, max_side=2, helpers=helpers)
    sizes = {size for shape, _ in seen for size in shape}
    assert sizes == {0, 1, 2}  # 0-size dims are drawn too


def test_dtypes_choose_the_dtypes_of_untyped_tensors() -> None:
    rules, helpers, seen = spying_rule()
    fxrules.verify(rules, max_examples=30, dtypes="float64,int32", helpers=helpers)
    assert {dtype for _, dtype in seen} == {torch.float64, torch.int32}
    seen.clear()
    fxrules.verify(rules, max_examples=10, dtypes=[torch.float16], helpers=helpers)
    assert {dtype for _, dtype in seen} == {torch.float16}


def test_dtypes_narrow_declared_captures_and_dtype_arguments() -> None:
    """A declared capture is drawn only with its dtypes that are also to be drawn, and a captured dtype
    argument (``x.to(d)``) names only dtypes to be drawn."""
    seen: list[torch.dtype] = []

    def spy(x: Any, d: torch.dtype) -> int:
        seen.extend((x.dtype, d))
        return 0

    rules = fxrules.parse("rule r:\n    given:\n        x: Tensor[..., dtype=float32|float64|int64]\n"
                          "    pattern:\n        return torch.neg(torch.neg(x.to(d)))\n"
                          "    replace:\n        return x.to(d) + @spy(x, d)\n", filename="typed.fxr")
    result = fxrules.verify(rules, max_examples=30, dtypes="float64,int32", helpers={"spy": spy})["r"]
    assert (result.verdict, set(seen)) == (Verdict.SOUND, {torch.float64, torch.int32}), str(result)


def test_dtypes_leaving_none_of_a_declared_capture_is_inconclusive() -> None:
    rules = fxrules.parse("rule r:\n    given:\n        x: Tensor[N, dtype=float32]\n"
                          "    pattern:\n        return torch.neg(torch.neg(x))\n    replace:\n        return x\n",
                          filename="typed.fxr")
    result = fxrules.verify(rules, max_examples=10, dtypes="int64")["r"]
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reason == "x is declared as float32; the dtypes to draw (int64) include none of them"


def test_rule_names_choose_which_rules_are_verified(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", TWO_RULES)
    report = fxrules.verify(rules, max_examples=10, names=["double_neg"])
    assert [r.rule for r in report.results] == ["double_neg"]
    assert main(["verify", str(rules), "--examples", "10", "--rule", "double_neg", "--no-prove"]) == 0
    assert capsys.readouterr().out.endswith("1 rule: 1 sound, 0 unsound, 0 inconclusive, 0 errors (seed 0)\n")


@pytest.mark.parametrize("count", [1, 3, 15])
def test_examples_sets_the_number_of_inputs_per_rule(count: int) -> None:
    rules, helpers, seen = spying_rule()
    result = fxrules.verify(rules, max_examples=count, helpers=helpers)["spy"]
    assert (result.verdict, result.examples, len(seen)) == (Verdict.SOUND, count, count)


@pytest.mark.parametrize(("options", "message"), [
    ({"max_examples": 0}, "max_examples must be a whole number of at least 1, got 0"),
    ({"max_examples": 2.5}, "max_examples must be a whole number of at least 1, got 2.5"),
    ({"max_side": 0}, "max_side must be a whole number from 1 to 16, got 0"),
    ({"max_side": 17}, "max_side must be a whole number from 1 to 16, got 17"),
    ({"seed": "abc"}, "seed must be a whole number, got abc"),
    ({"dtypes": "float32,flaot64"}, f"unknown dtype 'flaot64'; did you mean 'float64'? (verify draws {KNOWN_DTYPES})"),
    ({"dtypes": [torch.float8_e4m3fn]}, f"unknown dtype 'torch.float8_e4m3fn' (verify draws {KNOWN_DTYPES})"),
    ({"dtypes": ""}, f"no dtype given; name at least one of {KNOWN_DTYPES}"),
    ({"names": ["dubble_neg"]}, "only: no rule named 'dubble_neg' in the rules; did you mean 'double_neg'?"),
])
def test_bad_options_of_the_python_api(options: dict[str, Any], message: str) -> None:
    rules = fxrules.parse(TWO_RULES, filename="two.fxr")
    with pytest.raises(fxrules.FxrUsageError) as error:
        fxrules.verify(rules, **options)
    assert str(error.value) == message


@pytest.mark.parametrize(("arguments", "message"), [
    (["--examples", "0"], "argument --examples: must be a whole number of at least 1, got 0"),
    (["--examples", "many"], "argument --examples: must be a whole number of at least 1, got many"),
    (["--max-side", "99"], "argument --max-side: must be a whole number from 1 to 16, got 99"),
    (["--seed", "x"], "argument --seed: must be a whole number, got x"),
    (["--dtypes", "int64,flot32"],
     f"argument --dtypes: unknown dtype 'flot32'; did you mean 'float32'? (verify draws {KNOWN_DTYPES})"),
])
def test_bad_options_of_the_command_line(arguments: list[str], message: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", TWO_RULES)
    with pytest.raises(SystemExit) as exit_:
        main(["verify", str(rules), *arguments])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f"fxrules verify: error: {message}")


def test_an_unknown_rule_name_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = write(tmp_path / "rules.fxr", TWO_RULES)
    assert main(["verify", str(rules), "--rule", "relu_is_ab"]) == 2
    assert capsys.readouterr().err == ("fxrules verify: error: --rule: no rule named 'relu_is_ab' in the rules; "
                                       "did you mean 'relu_is_abs'?\n")


# ---------------------------------------------------------------- the pytest plugin: opt-in, and its options


RULE_FILE = ("rule good: torch.neg(torch.neg(x)) => x\n"
             "rule bad: torch.relu(x) => torch.abs(x)\n"
             "rule odd: torch.relu(x) => x where x.ndim > 10\n")
HOSTILE = "rule broken:\n    torch.neg(x => x\n"  # loading it fails: collected, it would be a failing item


def test_plugin_collects_no_rule_file_without_opt_in(pytester: pytest.Pytester) -> None:
    pytester.makefile(".fxr", rules=RULE_FILE, hostile=HOSTILE)
    result = pytester.runpytest("--fxrules-examples", "10")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.assert_outcomes()
    assert "fxrules:" not in result.stdout.str()  # no header either: nothing is verified


def test_plugin_flag_collects_the_named_paths_only(pytester: pytest.Pytester) -> None:
    pytester.mkdir("rulesets")
    write(pytester.path / "rulesets" / "rules.fxr", RULE_FILE)
    pytester.makefile(".fxr", hostile=HOSTILE)
    result = pytester.runpytest("--fxrules", "rulesets", "--fxrules-examples", "20", "--fxrules-no-prove", "-v")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["fxrules: rules under *rulesets (seed 0)", "*rules.fxr::good PASSED*",
                                 "*rules.fxr::bad FAILED*", "*rules.fxr::odd SKIPPED*"])
    result.stdout.fnmatch_lines(["*bad: unsound: values differ beyond tolerance*"])
    assert "hostile" not in result.stdout.str()


def test_plugin_flag_with_paths_given_runs_both(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    write(pytester.path / "rules.fxr", "rule good: torch.relu(torch.relu(x)) => torch.relu(x)\n")
    result = pytester.runpytest("test_plain.py", "--fxrules", "rules.fxr", "--fxrules-examples", "10")
    result.assert_outcomes(passed=2)


def test_plugin_ini_option_collects_rule_files_under_its_paths(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfxrules_paths = rulesets\nfxrules_examples = 20\nfxrules_seed = 5\n"
                     "fxrules_prove = false\n")
    pytester.mkdir("rulesets")
    write(pytester.path / "rulesets" / "rules.fxr", RULE_FILE)
    pytester.makefile(".fxr", hostile=HOSTILE)
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["fxrules: rules under *rulesets (seed 5)"])
    assert "hostile" not in result.stdout.str()
    selected = pytester.runpytest("-k", "good")
    selected.assert_outcomes(passed=1, deselected=2)


def test_plugin_reports_a_file_that_fails_to_load_when_opted_in(pytester: pytest.Pytester) -> None:
    pytester.makefile(".fxr", hostile=HOSTILE)
    result = pytester.runpytest("--fxrules", "hostile.fxr")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*hostile.fxr:2:*error*"])


def test_plugin_options_flags_and_dtypes(pytester: pytest.Pytester) -> None:
    write(pytester.path / "typed.fxr", "rule r:\n    given:\n        x: Tensor[N, dtype=float32]\n"
                                       "    pattern:\n        return torch.neg(torch.neg(x))\n"
                                       "    replace:\n        return x\n")
    result = pytester.runpytest("--fxrules", "typed.fxr", "--fxrules-dtypes", "int64", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*inconclusive: x is declared as float32; the dtypes to draw (int64) include none "
                                 "of them*"])


@pytest.mark.parametrize(("arguments", "ini", "message"), [
    (["--fxrules-examples", "0"], "",
     "ERROR: --fxrules-examples: max_examples must be a whole number of at least 1, got 0"),
    ([], "fxrules_max_side = 40\n", "ERROR: ini option fxrules_max_side: max_side must be a whole number from 1 to "
                                    "16, got 40"),
    (["--fxrules-dtypes", "float33"], "",
     f"ERROR: --fxrules-dtypes: unknown dtype 'float33'; did you mean 'float32'? (verify draws {KNOWN_DTYPES})"),
])
def test_plugin_refuses_bad_options(pytester: pytest.Pytester, arguments: list[str], ini: str, message: str) -> None:
    pytester.makeini("[pytest]\n" + ini)
    result = pytester.runpytest(*arguments)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
