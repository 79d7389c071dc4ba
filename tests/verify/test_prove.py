"""fxrules.prove and `fxrules prove`: proofs with z3 for elementwise rules, refutations that reproduce on tensors."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import fxrules
from fxrules.cli import main

pytest.importorskip("z3")

#: The rules of algebra.fxr whose operations are elementwise (or keep every element where it is).
ALGEBRA_ELEMENTWISE = {
    "mul_one": "x: float16|bfloat16|float32|float64",
    "add_zero": "x: uint8|int8|int16|int32|int64",
    "add_negative_zero": "x: float16|bfloat16|float32|float64",
    "sub_zero": "x: float16|bfloat16|float32|float64",
    "div_one": "x: float16|bfloat16|float32|float64",
    "contiguous_twice": "x: bool|uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64|complex64|complex128",
    "to_same_dtype": "x: bool|uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64|complex64|complex128",
    "cat_single": "x: bool|uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64|complex64|complex128",
    "dropout_eval": "x: bool|uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64|complex64|complex128",
    "expand_as_self": "x: bool|uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64|complex64|complex128",
    "view_as_self": "x: bool|uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64|complex64|complex128",
    "reshape_as_self": "x: bool|uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64|complex64|complex128",
    "type_as_self": "x: bool|uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64|complex64|complex128",
    "relu_idempotent": "x: uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64",
}

#: Wrong rules, each with the dtype configuration and the difference the replay on tensors shows.
WRONG_RULES = {
    "off_by_one_literal": ("""
        given:
            x: Tensor[dtype=int32|float32]
        pattern:
            return torch.gt(x, 0)
        replace:
            return torch.ge(x, 1)
        """, "(x: float32)", "values differ"),
    "wrong_promotion": ("""
        given:
            x: Tensor[dtype=int32]
        pattern:
            return mul(x, 2.0)
        replace:
            return mul(x, 2)
        """, "(x: int32)", "dtype torch.int32 differs from the pattern's torch.float32"),
    "int_overflow": ("""
        given:
            x: Tensor[dtype=int8]
        pattern:
            return torch.gt(add(x, 1), x)
        replace:
            return torch.eq(x, x)
        """, "(x: int8)", "values differ"),
    "negative_zero_add_zero": ("""
        given:
            x: Tensor[dtype=float32]
        pattern:
            return add(x, 0.0)
        replace:
            return x
        """, "(x: float32)", "the sign of a zero differs (-0.0 and 0.0)"),
    "maximum_as_where": ("""
        given:
            x: Tensor[dtype=float16]
            y: Tensor[dtype=float16]
        pattern:
            return torch.maximum(x, y)
        replace:
            return torch.where(torch.gt(x, y), x, y)
        """, "(x: float16, y: float16)", None),
    "where_drops_nan": ("""
        given:
            x: Tensor[dtype=float64]
        pattern:
            return torch.where(torch.gt(x, 0), x, 0.0)
        replace:
            return relu(x)
        """, "(x: float64)", "NaN appears in different places"),
    "floor_is_not_trunc": ("""
        given:
            x: Tensor[dtype=int16]
            y: Tensor[dtype=int16]
        pattern:
            return torch.div(x, y, rounding_mode="trunc")
        replace:
            return torch.div(x, y, rounding_mode="floor")
        """, "(x: int16, y: int16)", "values differ"),
    "half_rounds_twice": ("""
        given:
            x: Tensor[dtype=float16]
        pattern:
            return mul(mul(x, 0.5), 2.0)
        replace:
            return x
        """, "(x: float16)", "within the rounding tolerance verify allows"),
}


def write_rules(tmp_path: Path, text: str, name: str = "rules.fxr") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def rule_file(tmp_path: Path, name: str, body: str) -> Path:
    return write_rules(tmp_path, f"rule {name}:\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n")


@pytest.mark.slow
def test_every_elementwise_rule_of_algebra_is_proved() -> None:
    """Each elementwise rule of algebra.fxr is proved, for every dtype its capture may take."""
    report = fxrules.prove("algebra.fxr", names=list(ALGEBRA_ELEMENTWISE), timeout=60)
    assert {r.rule: (r.outcome.value, r.dtypes) for r in report.results} == {
        name: ("proved", (dtypes,)) for name, dtypes in ALGEBRA_ELEMENTWISE.items()}
    assert str(report["mul_one"]) == (
        "rulesets/algebra.fxr:10:6: mul_one: proved (dtypes x: float16|bfloat16|float32|float64)")


def test_double_neg_is_refuted_on_complex_tensors_where_vectorized_neg_loses_the_sign_of_zero(tmp_path: Path) -> None:
    """torch's vectorized complex neg computes 0 - x: neg(neg(-0.0 + 0j)) is 0j on a 64-element tensor, so a
    double negation that claims bit-equal outputs is refuted on complex64."""
    path = tmp_path / "neg.fxr"
    path.write_text("rule double_neg: neg(neg(x)) => x\n", encoding="utf-8")
    result = fxrules.prove(path)["double_neg"]
    # Which zero z3 offers depends on its state: -0+0j replays as a refutation; +0+0j differs only where the
    # two negations take different kernel paths (a strided input), which replay on contiguous tensors does
    # not reach, so it is reported as the model differing from torch. Never a proof.
    assert result.outcome.value in ("refuted", "solver/torch mismatch"), str(result)
    assert result.reason.startswith("the solver found the outputs differ")
    assert result.reason.endswith("(x: complex64)")
    assert result.counterexample is not None
    if result.outcome.value == "refuted":
        assert result.counterexample.problem == "the sign of a zero differs (-0.0 and 0.0)"
    x = torch.full((64,), complex(-0.0, 0.0), dtype=torch.complex64)
    assert not same_bits(torch.view_as_real(torch.neg(torch.neg(x))), torch.view_as_real(x))


@pytest.mark.parametrize(("given", "pattern", "replacement"), [
    ("x: Tensor[dtype=float16]\n        y: Tensor[dtype=int64]", "torch.maximum(x - y, x - y)", "x - y"),
    ("x: Tensor[dtype=float16]", "torch.minimum(x, torch.abs(x)).contiguous()", "torch.minimum(x, torch.abs(x))"),
], ids=["mixed_dtype_operand", "tie_of_zeros"])
def test_the_same_computation_on_both_sides_takes_the_same_kernel(given: str, pattern: str, replacement: str) -> None:
    """Where torch's result depends on the kernel it picks by size (which zero a tie of maximum returns, how a
    float16 kernel reads an int64 operand), the same computation on both sides picks the same kernel: a rule
    that repeats it is proved, not a solver/torch mismatch."""
    source = f"rule same:\n    given:\n        {given}\n    pattern:\n        return {pattern}\n" \
             f"    replace:\n        return {replacement}\n"
    (result,) = fxrules.prove(fxrules.parse(source), timeout=60).results
    assert result.outcome.value == "proved", str(result)


def test_a_zero_tolerance_proves_equality_but_for_the_sign_of_a_zero(tmp_path: Path) -> None:
    """``@tolerance(atol=0.0, rtol=0.0)`` claims exact outputs but for the sign of a zero: the bundled
    double_neg, which says so, is proved on every dtype neg takes, complex ones included, while ``x + 0.0``
    (which turns -0.0 into 0.0) is proved under it and refuted without it."""
    result = fxrules.prove("algebra.fxr", names=["double_neg"])["double_neg"]
    assert (result.outcome.value, result.dtypes) == (
        "proved", ("x: uint8|int8|int16|int32|int64|float16|bfloat16|float32|float64|complex64|complex128",))
    path = tmp_path / "zero.fxr"
    path.write_text("@tolerance(atol=0.0, rtol=0.0)\nrule plus_zero: x + 0.0 => x where x.dtype == torch.float32\n"
                    "rule exact_plus_zero: x + 0.0 => x where x.dtype == torch.float32\n", encoding="utf-8")
    report = fxrules.prove(path)
    assert report["plus_zero"].outcome.value == "proved"
    assert report["exact_plus_zero"].outcome.value == "refuted"
    assert report["exact_plus_zero"].counterexample is not None
    assert report["exact_plus_zero"].counterexample.problem == "the sign of a zero differs (-0.0 and 0.0)"


def test_layout_rules_of_algebra_say_why_they_are_not_provable() -> None:
    """Rules whose operations move elements (transpose, permute, reshape) are outside the elementwise model."""
    report = fxrules.prove("algebra.fxr", names=["double_transpose", "permute_inverse", "reshape_chain"])
    assert [(r.outcome.value, r.reason) for r in report.results] == [
        ("not provable here", "capture a is a dim: only tensor, dtype, float and int captures are modeled"),
        ("not provable here", "the guard at rulesets/algebra.fxr:68:9 reads more than dtypes and numbers"),
        ("not provable here", "capture a is a shape: only tensor, dtype, float and int captures are modeled"),
    ]


@pytest.mark.parametrize("name", list(WRONG_RULES))
def test_wrong_rule_is_refuted_with_a_counterexample_that_reproduces_on_tensors(tmp_path: Path, name: str) -> None:
    """The solver's counterexample, run on real tensors by the reproduction code, gives different outputs."""
    body, config, replayed = WRONG_RULES[name]
    path = rule_file(tmp_path, name, body)
    result = fxrules.prove(path)[name]
    assert result.outcome.value == "refuted", str(result)
    assert result.reason.endswith(config)
    assert result.counterexample is not None
    if replayed is not None:
        assert replayed in result.counterexample.problem
    namespace: dict[str, object] = {}
    *setup, last = result.counterexample.reproduction.splitlines()
    exec("\n".join(setup), namespace)
    outputs = last.removeprefix("print(").removesuffix(")")
    expected, actual = eval(f"({outputs})", namespace)
    assert not same_bits(expected, actual)


def same_bits(expected: torch.Tensor, actual: torch.Tensor) -> bool:
    """Same dtype, shape and values, NaN equal to NaN and -0.0 different from 0.0."""
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return False
    if not expected.dtype.is_floating_point:
        return torch.equal(expected, actual)
    equal = (expected == actual) & (expected.signbit() == actual.signbit())
    return bool((equal | (expected.isnan() & actual.isnan())).all())


def test_counterexample_shows_the_inputs_and_the_replayed_difference(tmp_path: Path) -> None:
    """The report of a refuted rule names the dtypes, the inputs, the replayed difference and how to reproduce."""
    path = rule_file(tmp_path, "int_overflow", WRONG_RULES["int_overflow"][0])
    text = str(fxrules.prove(path)["int_overflow"])
    assert text.splitlines()[:4] == [
        f"{path}:1:6: int_overflow: refuted: the solver found the outputs differ (x: int8)",
        "  counterexample:",
        "    x: Tensor[1] torch.int8 = [127]",
        "  replayed: values differ",
    ]
    assert "x = torch.tensor([127], dtype=torch.int8)" in text


def test_finite_inputs_leaves_nan_and_inf_out(tmp_path: Path) -> None:
    """x == x is True for every finite x: refuted by NaN, proved under @finite_inputs()."""
    body = """
        given:
            x: Tensor[dtype=float32|bfloat16]
        pattern:
            return torch.eq(x, x)
        replace:
            return torch.ne(x, nan)
        """
    plain = fxrules.prove(rule_file(tmp_path, "eq_self", body))["eq_self"]
    assert plain.outcome.value == "refuted"
    assert "x: Tensor[1] torch.float32 = [nan]" in plain.counterexample.inputs  # type: ignore[union-attr]
    finite = write_rules(tmp_path, "@finite_inputs()\nrule eq_self:\n" + textwrap.indent(
        textwrap.dedent(body).strip("\n"), "    ") + "\n", "finite.fxr")
    assert str(fxrules.prove(finite)["eq_self"]).endswith("eq_self: proved (dtypes x: bfloat16|float32)")


def test_dtype_guard_is_decided_per_dtype(tmp_path: Path) -> None:
    """A guard on dtypes is decided for each configuration: the wrong one is refuted by a dtype difference."""
    path = rule_file(tmp_path, "to_other_dtype", """
        given:
            d: dtype
            x: Tensor[dtype=float32|int64]
        pattern:
            return x.to(d)
        where:
            x.dtype != d and d == torch.float64
        replace:
            return x
        """)
    result = fxrules.prove(path)["to_other_dtype"]
    assert result.outcome.value == "refuted"
    assert result.reason == ("dtype torch.float32 differs from the pattern's torch.float64 (x: float32, "
                             "d: float64)")


def test_operations_outside_the_model_are_named(tmp_path: Path) -> None:
    """A reduction, a bool capture and a guard on shapes each say what is not modeled."""
    path = write_rules(tmp_path, """
        rule sum_twice:
            given:
                x: Tensor[dtype=float32]
            pattern:
                return torch.sum(torch.sum(x))
            replace:
                return torch.sum(x)

        rule dropout_flag:
            given:
                b: bool
            pattern:
                return dropout(x, training=b)
            replace:
                return x

        rule same_shape:
            pattern:
                return reshape(x, s)
            where:
                list(x.shape) == list(s)
            replace:
                return x
        """)
    report = fxrules.prove(path)
    assert [r.reason for r in report.results] == [
        "sum",
        "capture b is a bool: only tensor, dtype, float and int captures are modeled",
        f"the guard at {path}:22:9 reads more than dtypes and numbers",
    ]
    assert report.sound


@pytest.mark.filterwarnings("ignore::fxrules.FxrLoopWarning")  # the rule is only proved, never applied
def test_a_rule_past_its_time_budget_is_not_provable_timeout(tmp_path: Path) -> None:
    """Associativity of float64 multiplication is beyond a 0.5 s budget: 'timeout', after about that long."""
    path = rule_file(tmp_path, "assoc", """
        given:
            x: Tensor[dtype=float64]
            y: Tensor[dtype=float64]
            z: Tensor[dtype=float64]
        pattern:
            return mul(mul(x, y), z)
        replace:
            return mul(x, mul(y, z))
        """)
    result = fxrules.prove(path, timeout=0.5)["assoc"]
    assert (result.outcome.value, result.reason) == ("not provable here", "timeout")
    assert result.seconds < 3


def test_tolerance_rule_differing_within_its_tolerance_is_not_refuted(tmp_path: Path) -> None:
    """A rule with @tolerance that is not exact is 'not provable here', with the inputs, not refuted."""
    path = write_rules(tmp_path, """
        @tolerance(atol=1e-3, rtol=1e-3)
        rule half_rounds_twice:
            given:
                x: Tensor[dtype=float16]
            pattern:
                return mul(mul(x, 0.5), 2.0)
            replace:
                return x
        """)
    result = fxrules.prove(path)["half_rounds_twice"]
    assert result.outcome.value == "not provable here"
    assert result.reason.startswith("the outputs are not equal (values differ by up to")
    assert result.reason.endswith("within the rule's @tolerance, which prove does not encode")


def test_without_z3_prove_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Without the solver, the API raises and the command exits 2, both naming the extra to install."""
    monkeypatch.setitem(sys.modules, "z3", None)
    with pytest.raises(fxrules.FxrUsageError, match=r"pip install fxrules\[prove\]"):
        fxrules.prove("algebra.fxr")
    assert main(["prove", "algebra.fxr"]) == 2
    assert capsys.readouterr().err == ("fxrules prove: error: fxrules prove needs the z3 solver: "
                                       "pip install fxrules[prove]\n")


def test_command_prints_each_rule_and_exits_1_on_a_refuted_one(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`fxrules prove` prints a line per rule and a summary; exit 1 when a rule is refuted, 0 otherwise."""
    assert main(["prove", "algebra.fxr", "--rule", "add_zero", "--rule", "double_transpose"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "rulesets/algebra.fxr:19:6: add_zero: proved (dtypes x: uint8|int8|int16|int32|int64)",
        "rulesets/algebra.fxr:59:6: double_transpose: not provable here: capture a is a dim: only tensor, "
        "dtype, float and int captures are modeled",
        "2 rules: 1 proved, 0 refuted, 1 not provable here, 0 solver/torch mismatch",
    ]
    path = rule_file(tmp_path, "negative_zero_add_zero", WRONG_RULES["negative_zero_add_zero"][0])
    assert main(["prove", str(path), "--json", "--timeout", "10"]) == 1
    (result,) = json.loads(capsys.readouterr().out)["rules"]
    assert (result["outcome"], result["counterexample"]["inputs"]) == ("refuted",
                                                                       ["x: Tensor[1] torch.float32 = [-0.0]"])


def test_command_refuses_a_bad_timeout_and_an_unknown_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """A timeout that is not a positive number, or a --rule naming no rule, is a usage error (exit 2)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["prove", "algebra.fxr", "--timeout", "0"])
    assert exit_info.value.code == 2
    assert "argument --timeout: must be a positive number of seconds, got '0'" in capsys.readouterr().err
    assert main(["prove", "algebra.fxr", "--rule", "double_neq"]) == 2
    assert capsys.readouterr().err == ("fxrules prove: error: no rule named 'double_neq' in the rules to prove; "
                                       "did you mean 'double_neg'?\n")
    with pytest.raises(fxrules.FxrUsageError, match="timeout must be a positive number of seconds, got -1"):
        fxrules.prove("algebra.fxr", timeout=-1)


@pytest.mark.filterwarnings("ignore::fxrules.FxrLoopWarning")  # the rule is only proved, never applied
def test_many_configurations_stop_at_the_time_budget(tmp_path: Path) -> None:
    """Four untyped captures make 12**4 dtype choices times 16 rank choices: the budget stops the run."""
    path = rule_file(tmp_path, "four", """
        pattern:
            return torch.where(a, add(b, c), d)
        replace:
            return torch.where(a, add(c, b), d)
        """)
    result = fxrules.prove(path, timeout=1)["four"]
    assert (result.outcome.value, result.reason) == ("not provable here", "timeout")
    assert result.seconds < 4


def proofs_table() -> dict[str, str]:
    """Rule -> what the Proofs section of docs/rulesets.md says prove gives it (the first words)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "rulesets.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Proofs"):]
    table: dict[str, str] = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            names, says = line.split("|")[1:3]
            outcome = "proved" if says.strip().startswith("proved") else says.strip()
            for name in names.split(","):
                table[name.strip(" `")] = outcome
    return table


@pytest.mark.slow
def test_bundled_rules_prove_as_rulesets_md_says() -> None:
    """Every bundled rule is in the Proofs table of docs/rulesets.md, with the outcome prove gives it."""
    report = fxrules.prove(["algebra.fxr", "fusions.fxr", "cleanup.fxr"], timeout=60)
    assert {r.rule: r.outcome.value for r in report.results} == proofs_table()
