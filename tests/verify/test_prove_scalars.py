"""fxrules.prove with float and int captures: numbers the solver chooses, converted as torch converts a scalar,
constrained by the guards that read them."""

from __future__ import annotations

import pytest
import torch

from fxrules.verification.prove import Outcome, RuleProof
from tests.verify.proving import prove_one

pytest.importorskip("z3")


def clamp_relu(dtype: str, kind: str, guard: str) -> str:
    return f"""
        rule clamp_relu:
            given:
                x: Tensor[dtype={dtype}]
                c: {kind}
            pattern:
                return torch.clamp_min(relu(x), c)
            where:
                {guard}
            replace:
                return relu(x)
        """


def replayed(result: RuleProof) -> tuple[torch.Tensor, torch.Tensor]:
    """The counterexample's inputs run through both sides of a rule whose pattern is clamp_min(relu(x), c)."""
    assert result.counterexample is not None
    namespace: dict[str, object] = {}
    exec("\n".join(line for line in result.counterexample.reproduction.splitlines()
                   if not line.startswith(("rule", "graphs", "print"))), namespace)
    x, c = namespace["x"], namespace["c"]
    return torch.clamp_min(torch.relu(x), c), torch.relu(x)  # type: ignore[call-overload, arg-type]


@pytest.mark.parametrize(("dtype", "kind", "guard"), [
    ("float16|float32", "float", "c <= 0.0"),
    ("int64", "int", "c <= 0"),
    ("float32", "float", "not c > 0 and c == c"),
])
def test_a_guard_on_a_capture_that_makes_the_rule_hold_is_proved(dtype: str, kind: str, guard: str) -> None:
    """clamp_min(relu(x), c) is relu(x) for every c the guard allows (NaN excluded by c == c, as Python does)."""
    result = prove_one(clamp_relu(dtype, kind, guard))
    assert result.outcome is Outcome.PROVED, str(result)
    assert result.dtypes == (f"x: {dtype}",)


def test_a_guard_off_by_one_is_refuted_with_the_capture_s_value() -> None:
    """With c <= 1 the clamp lifts a zero (or a negative x) to 1: the counterexample names c and reproduces."""
    result = prove_one(clamp_relu("int64", "int", "c <= 1"))
    assert result.outcome is Outcome.REFUTED
    assert result.reason == "the solver found the outputs differ (x: int64, c: int)"
    assert result.counterexample is not None and "c = 1" in result.counterexample.inputs
    expected, actual = replayed(result)
    assert not torch.equal(expected, actual)


def test_a_guard_that_lets_nan_through_is_refuted() -> None:
    """not c > 0 holds for a NaN c, and clamp_min(x, nan) is NaN."""
    result = prove_one(clamp_relu("float32", "float", "not c > 0"))
    assert result.outcome is Outcome.REFUTED
    assert result.counterexample is not None and "c = nan" in result.counterexample.inputs
    expected, actual = replayed(result)
    assert expected.isnan().all() and not actual.isnan().any()


@pytest.mark.parametrize(("pattern", "guard", "inputs"), [
    ("add(x, c)", "c == 0.0", ("x: Tensor[1] torch.float32 = [-0.0]", "c = 0.0")),
    ("relu(mul(x, c))", "c > 0.0 and c < 1.0", None),
])
def test_a_guard_too_weak_for_negative_zero_is_refuted(pattern: str, guard: str,
                                                        inputs: tuple[str, ...] | None) -> None:
    """x + c with c == 0.0 (also 0.0 itself) turns -0.0 into 0.0; relu(x * c) with c > 0 keeps the -0.0 of
    an underflowing product where relu(x) * c is 0.0 (finite inputs and c < 1: no product overflows)."""
    result = prove_one(f"""
        @finite_inputs()
        rule weak:
            given:
                x: Tensor[dtype=float32]
                c: float
            pattern:
                return {pattern}
            where:
                {guard}
            replace:
                return {"x" if pattern.startswith("add") else "mul(relu(x), c)"}
        """)
    assert result.outcome is Outcome.REFUTED, str(result)
    assert result.counterexample is not None
    assert result.counterexample.problem == "the sign of a zero differs (-0.0 and 0.0)"
    if inputs is not None:
        assert result.counterexample.inputs == inputs


def test_a_float_capture_times_one_is_proved_for_half_precision() -> None:
    """x * c with c == 1.0 is x: c is converted to float32 and the product rounded once to float16."""
    result = prove_one("""
        rule mul_by_one:
            given:
                x: Tensor[dtype=float16|float32]
                c: float
            pattern:
                return mul(x, c)
            where:
                c == 1.0
            replace:
                return x
        """)
    assert str(result).endswith("mul_by_one: proved (dtypes x: float16|float32)")


def test_an_int_capture_times_a_float_tensor_is_converted_as_torch_converts_it() -> None:
    """A Python float promotes an int64 tensor to float32; the int capture keeps it int64: refuted on dtype."""
    result = prove_one("""
        rule int_to_float:
            given:
                x: Tensor[dtype=int64]
                c: float
            pattern:
                return mul(x, c)
            where:
                c == 1.0
            replace:
                return x
        """)
    assert result.outcome is Outcome.REFUTED
    assert result.reason == "dtype torch.int64 differs from the pattern's torch.float32 (x: int64, c: float)"


@pytest.mark.filterwarnings("ignore::fxrules.FxrLoopWarning")  # the rule is only proved, never applied
def test_conversions_to_half_precision_round_through_float32() -> None:
    """torch converts float64 to float16 through float32 (two roundings), and the proof says the same."""
    result = prove_one("""
        rule double_to_half:
            given:
                x: Tensor[dtype=float64]
            pattern:
                return x.to(torch.float16)
            replace:
                return x.to(torch.float32).to(torch.float16)
        """)
    assert result.outcome is Outcome.PROVED, str(result)
    halfway = torch.tensor([1 + 2**-11 + 2**-40], dtype=torch.float64)  # rounds up once, to even twice
    assert torch.equal(halfway.to(torch.float16), halfway.float().to(torch.float16))


@pytest.mark.parametrize(("given", "guard", "reason"), [
    ("x: Tensor[dtype=int8]\n                c: int", "c == 0",
     "an int capture converted to torch.int8 (torch wraps a number out of its range in some operations and "
     "raises in others)"),
    ("x: Tensor[dtype=float32]\n                c: int", "c > 0.5",
     "the guard at <string>:9:9 compares an int capture with a float"),
    ("x: Tensor[dtype=float32]\n                c: float", "c + 1 > 0",
     "the guard at <string>:9:9 reads more than dtypes and numbers"),
])
def test_captures_outside_the_model_say_why(given: str, guard: str, reason: str) -> None:
    result = prove_one(f"""
        rule outside:
            given:
                {given}
            pattern:
                return add(x, c)
            where:
                {guard}
            replace:
                return x
        """)
    assert (result.outcome, result.reason) == (Outcome.NOT_PROVABLE, reason)
