"""fxrules.prove with transcendental functions: uninterpreted functions tied only by axioms torch's kernels hold."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional

from fxrules.cli import main
from fxrules.verification.axioms import PATH_FREE, TRANSCENDENTALS
from fxrules.verification.prove import Outcome
from tests.verify.proving import prove_one

pytest.importorskip("z3")

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
KERNELS = {name: getattr(torch.nn.functional if name in ("silu", "mish") else torch, name)
           for name in TRANSCENDENTALS}


def every_value(dtype: torch.dtype) -> torch.Tensor:
    """Every value of a 16-bit dtype; for float32 and float64 random bit patterns, ordinary numbers and the
    special values."""
    if dtype.itemsize == 2:
        return torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype)
    generator = torch.Generator().manual_seed(0)
    bits = torch.randint(-(1 << 62), 1 << 62, (1 << 18,), generator=generator, dtype=torch.int64) * 2
    patterns = bits.to(torch.int32).view(torch.float32) if dtype == torch.float32 else bits.view(torch.float64)
    ordinary = torch.randn(1 << 16, generator=generator, dtype=dtype) * 20
    specials = torch.tensor([0.0, -0.0, 1.0, -1.0, torch.inf, -torch.inf, torch.nan], dtype=dtype)
    return torch.cat([patterns.to(dtype), ordinary, specials])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return ((a == b) & (a.signbit() == b.signbit())) | (a.isnan() & b.isnan())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_axioms_hold_for_torch_kernels(dtype: torch.dtype) -> None:
    """nan gives nan and results stay within the stated bounds on both kernel paths (the vectorized loop and
    the scalar one, which a strided input takes), and the functions said path-free compute the same bits on
    both and on 0-dim tensors."""
    x = every_value(dtype)
    for name, kernel in KERNELS.items():
        vectorized = kernel(x)
        scalar = kernel(x.repeat_interleave(2)[::2])
        for results in (vectorized, scalar):
            assert results[x.isnan()].isnan().all(), name
            bounds = TRANSCENDENTALS[name]
            if bounds is not None:
                numbers = results[~results.isnan()].double()
                assert bounds[0] <= numbers.min() and numbers.max() <= bounds[1], name
        if dtype.itemsize == 2:
            path_free = bool(same_bits(vectorized, scalar).all())
            assert path_free == ((name, dtype) in PATH_FREE), name
            if path_free:
                zero_dim = torch.stack([kernel(v) for v in x[::128]])
                assert same_bits(zero_dim, vectorized[::128]).all(), name


def test_moving_a_transcendental_is_proved_and_names_its_axioms() -> None:
    """relu of tanh is clamp_min of the same tanh: proved by determinism and tanh's bounds, which it names."""
    result = prove_one("""
        rule relu_tanh:
            given:
                x: Tensor[dtype=float16|bfloat16|float32|float64]
            pattern:
                return relu(torch.tanh(x))
            replace:
                return torch.clamp_min(torch.tanh(x), 0.0)
        """)
    assert str(result) == (
        "<string>:2:6: relu_tanh: proved (dtypes x: float16|bfloat16|float32|float64; axioms: determinism of "
        "torch.tanh, torch.tanh within [-1, 1], torch.tanh(nan) is nan)")
    assert result.axioms == ("determinism of torch.tanh", "torch.tanh within [-1, 1]", "torch.tanh(nan) is nan")


@pytest.mark.parametrize(("pattern", "replacement"), [
    ("relu(torch.exp(x))", "torch.exp(x)"),
    ("mul(torch.exp(x), 1.0)", "torch.exp(x)"),
    ("torch.clamp(torch.sigmoid(x), 0.0, 1.0)", "torch.sigmoid(x)"),
    ("torch.clamp_min(torch.sqrt(x), 0.0)", "torch.sqrt(x)"),
    ("neg(neg(torch.log(x)))", "x.log()"),
], ids=["relu_exp", "exp_mul_one", "clamp_sigmoid", "sqrt_at_least_zero", "double_neg_log"])
def test_rules_that_keep_the_call_on_the_same_argument_are_proved(pattern: str, replacement: str) -> None:
    result = prove_one(f"""
        rule moved:
            given:
                x: Tensor[dtype=float32|float64]
            pattern:
                return {pattern}
            replace:
                return {replacement}
        """)
    assert result.outcome is Outcome.PROVED, str(result)
    assert result.dtypes == ("x: float32|float64",)


def test_exp_of_a_sum_is_not_the_product_of_exps() -> None:
    """exp(a + b) == exp(a) * exp(b) is no axiom: the rule is never proved, and a refutation reproduces."""
    result = prove_one("""
        rule exp_sum:
            given:
                a: Tensor[dtype=float32]
                b: Tensor[dtype=float32]
            pattern:
                return torch.exp(add(a, b))
            replace:
                return mul(torch.exp(a), torch.exp(b))
        """)
    assert result.outcome in (Outcome.REFUTED, Outcome.NOT_PROVABLE), str(result)
    if result.outcome is Outcome.REFUTED:
        assert result.counterexample is not None
        namespace: dict[str, object] = {}
        setup = [line for line in result.counterexample.reproduction.splitlines()
                 if not line.startswith(("rule", "graphs", "print"))]  # the inputs: a parsed rule has no file
        exec("\n".join(setup), namespace)
        a, b = namespace["a"], namespace["b"]
        assert not same_bits(torch.exp(a + b), torch.exp(a) * torch.exp(b)).all()  # type: ignore[operator]


def test_sigmoid_is_not_assumed_to_be_its_formula() -> None:
    """torch's sigmoid is not bit-exactly 1 / (1 + exp(-x)): nothing ties the two functions, no proof."""
    result = prove_one("""
        rule sigmoid_formula:
            given:
                x: Tensor[dtype=float16]
            pattern:
                return torch.sigmoid(x)
            replace:
                return div(1.0, add(1.0, torch.exp(neg(x))))
        """)
    assert result.outcome in (Outcome.REFUTED, Outcome.NOT_PROVABLE), str(result)


def test_a_difference_resting_on_chosen_function_values_is_not_a_refutation() -> None:
    """tanh(-x) and -tanh(x): without an oddness axiom the solver finds them different, torch does not: the
    rule is not provable here, and the reason names the function and the inputs tried."""
    result = prove_one("""
        rule tanh_odd:
            given:
                x: Tensor[dtype=float32]
            pattern:
                return torch.tanh(neg(x))
            replace:
                return neg(torch.tanh(x))
        """)
    assert result.outcome is Outcome.NOT_PROVABLE
    assert result.reason.startswith("the solver's differences rest on the values it chose for tanh "
                                    "(uninterpreted); torch computes the same outputs on the inputs it found "
                                    "(x: float32: x = ")
    assert result.reason.count("; x = ") == 3


@pytest.mark.parametrize(("dtype", "proved"), [("float16", True), ("float32", False)])
def test_a_kernel_path_is_shared_only_by_the_same_computation(dtype: str, proved: bool) -> None:
    """sigmoid of x and of x.contiguous() may run on different kernel paths, which differ on float32 (not on
    float16, where every value was checked): proved for float16 only."""
    result = prove_one(f"""
        rule sigmoid_contiguous:
            given:
                x: Tensor[dtype={dtype}]
            pattern:
                return torch.sigmoid(x.contiguous())
            replace:
                return torch.sigmoid(x)
        """)
    assert (result.outcome is Outcome.PROVED) == proved, str(result)
    if not proved:
        assert result.outcome is Outcome.NOT_PROVABLE
        assert "rest on the values it chose for sigmoid" in result.reason


def test_transcendental_of_an_integer_tensor_is_not_modeled() -> None:
    """exp of an int32 tensor computes in float32 after a conversion the model does not claim."""
    result = prove_one("""
        rule exp_int:
            given:
                x: Tensor[dtype=int32]
            pattern:
                return relu(torch.exp(x))
            replace:
                return torch.exp(x)
        """)
    assert (result.outcome, result.reason) == (
        Outcome.NOT_PROVABLE, "exp of torch.int32: a transcendental function is modeled on float tensors only")


def test_command_reports_the_axioms_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`fxrules prove --json` gives each proved rule's axioms as a list."""
    path = tmp_path / "rules.fxr"
    path.write_text(textwrap.dedent("""
        rule relu_exp:
            given:
                x: Tensor[dtype=float32]
            pattern:
                return relu(torch.exp(x))
            replace:
                return torch.exp(x)
        """), encoding="utf-8")
    assert main(["prove", str(path), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["rules"]
    assert (result["outcome"], result["axioms"]) == (
        "proved", ["determinism of torch.exp", "torch.exp within [0, inf]", "torch.exp(nan) is nan"])


@pytest.mark.filterwarnings("ignore::fxrules.FxrLoopWarning")  # the rule is only proved, never applied
def test_a_rule_with_uninterpreted_functions_keeps_its_time_budget() -> None:
    """exp of a float64 product, reassociated: beyond a 0.1 s budget, 'timeout', after about that long."""
    result = prove_one("""
        rule exp_assoc:
            given:
                x: Tensor[dtype=float64]
                y: Tensor[dtype=float64]
                z: Tensor[dtype=float64]
            pattern:
                return torch.exp(mul(mul(x, y), z))
            replace:
                return torch.exp(mul(x, mul(y, z)))
        """, timeout=0.1)
    assert (result.outcome, result.reason) == (Outcome.NOT_PROVABLE, "timeout")
    assert result.seconds < 3
