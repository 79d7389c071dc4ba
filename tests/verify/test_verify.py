"""verify(): deliberately wrong rules come out unsound, bundled rules sound, results a user can act on."""

from __future__ import annotations

import json
import os

import pytest
import torch

import fxrules
from fxrules.cli import main
from fxrules.verification.soundness import Verdict, compare, verify_rule
from tests.conftest import fold_rule, slow_examples

SEED = 20261129
EXAMPLES = int(os.environ.get("FXRULES_VERIFY_EXAMPLES", "60"))


def forgets_the_bias(conv: torch.nn.Conv2d, bn: torch.nn.BatchNorm2d) -> torch.nn.Module:
    """A conv+bn fold that scales the weight but forgets the shifted bias."""
    fused = torch.nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                            conv.dilation, conv.groups, bias=conv.bias is not None)
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    fused.weight.data = conv.weight * scale.reshape(-1, 1, 1, 1)
    if conv.bias is not None:
        fused.bias.data = conv.bias.detach().clone()
    return fused.eval()


WRONG_RULES = {
    "swapped_sub": "rule swapped_sub: torch.sub(x, y) => torch.sub(y, x)",
    "swapped_operator_sub": "rule swapped_operator_sub: x - y => y - x",
    "wrong_reduction_dim": """
rule wrong_reduction_dim:
    given:
        x: Tensor[M, N]
    pattern:
        return torch.sum(x, 0)
    replace:
        return torch.sum(x, -1)
""",
    "transpose_square": """
rule transpose_square:
    given:
        x: Tensor[N, N]
    pattern:
        return x.transpose(0, 1) + x
    replace:
        return x + x
""",
    "folding_forgets_bias": fold_rule("folding_forgets_bias", "forgets_the_bias"),
    "times_zero": "rule times_zero: x * 0 => torch.zeros_like(x)",
    "integer_division": """
rule integer_division:
    given:
        x: Tensor[N, dtype=int64]
    pattern:
        return (x // 2) * 2
    replace:
        return x
""",
    "dtype_change": "rule dtype_change: torch.relu(x) => torch.relu(x).double()",
    "broadcasting": """
rule broadcasting:
    given:
        x: Tensor[M, N]
        y: Tensor[N]
    pattern:
        return torch.sum(x + y, 0)
    replace:
        return torch.sum(x, 0) + y
""",
    "exp_log": "rule exp_log: torch.exp(torch.log(x)) => x",
    "sqrt_square": "rule sqrt_square: torch.sqrt(x * x) => x",
    "softmax_dim": """
rule softmax_dim:
    given:
        x: Tensor[M, N]
    pattern:
        return torch.softmax(x, -1)
    replace:
        return torch.softmax(x, 0)
""",
    "relu_is_abs": "rule relu_is_abs: torch.relu(x) => torch.abs(x)",
    "mean_is_sum": """
rule mean_is_sum:
    given:
        x: Tensor[M, N]
    pattern:
        return torch.mean(x, -1)
    replace:
        return torch.sum(x, -1)
""",
    "max_is_min": "rule max_is_min: torch.maximum(x, y) => torch.minimum(x, y)",
    "cat_order": "rule cat_order: torch.cat([x, y]) => torch.cat([y, x])",
    "replacement_raises": "rule replacement_raises: torch.relu(x) => torch.matmul(x, torch.ones(7, 7))",
}


@pytest.mark.parametrize("name", sorted(WRONG_RULES))
def test_wrong_rule_is_unsound(name: str) -> None:
    [rule] = fxrules.parse(WRONG_RULES[name], filename=f"{name}.fxr").rules
    result = verify_rule(rule, max_examples=EXAMPLES, seed_value=SEED, helpers={"forgets_the_bias": forgets_the_bias})
    assert result.verdict is Verdict.UNSOUND, str(result)
    assert result.counterexample is not None
    assert result.counterexample.inputs  # the shrunk inputs are named


def test_counterexample_is_shrunk_and_actionable() -> None:
    [rule] = fxrules.parse(WRONG_RULES["times_zero"], filename="times_zero.fxr").rules
    result = verify_rule(rule, max_examples=EXAMPLES, seed_value=SEED)
    counterexample = result.counterexample
    assert counterexample is not None
    # zeros_like(x) has no gradient to x; x * 0 has: found first, on the simplest input
    assert counterexample.problem == "output 0 is not differentiable in the replacement, unlike in the pattern"
    assert counterexample.inputs == ("x: Tensor[] torch.float32 = 0.0",)  # shrunk to a single zero
    text = str(result)
    assert text.startswith("times_zero.fxr:1:6: times_zero: unsound: ")
    assert "reproduce:" in text and "x = torch.tensor(0.0, dtype=torch.float32)" in text


def test_difference_sizes_are_reported() -> None:
    [rule] = fxrules.parse(WRONG_RULES["relu_is_abs"]).rules
    result = verify_rule(rule, max_examples=EXAMPLES, seed_value=SEED)
    assert result.counterexample is not None
    assert result.counterexample.max_abs_diff is not None and result.counterexample.max_abs_diff > 0
    assert result.counterexample.max_rel_diff is not None


def test_replacement_that_raises_is_unsound_with_the_error() -> None:
    [rule] = fxrules.parse(WRONG_RULES["replacement_raises"]).rules
    result = verify_rule(rule, max_examples=EXAMPLES, seed_value=SEED)
    assert result.reason.startswith("the replacement raises RuntimeError")


def test_guard_nobody_satisfies_is_inconclusive() -> None:
    [rule] = fxrules.parse("rule never: torch.relu(x) => x where x.ndim > 10").rules
    result = verify_rule(rule, max_examples=20, seed_value=SEED)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "satisfied the guard" in result.reason


def test_sound_rules_with_guards_and_alternatives() -> None:
    text = """
rule neg_neg_any_spelling: torch.neg(torch.neg(x)) | operator.neg(operator.neg(x)) => x
rule positive_relu: torch.relu(x) => x where x.ndim == 0
"""
    results = [verify_rule(rule, max_examples=30, seed_value=SEED, prove=False) for rule in fxrules.parse(text)]
    assert [r.verdict for r in results] == [Verdict.SOUND, Verdict.UNSOUND]


def test_tolerance_decorator_loosens_the_comparison() -> None:
    text = """
@tolerance(atol=0.2, rtol=0)
rule approx: torch.sigmoid(x) => 0.5 + x / 4 where x.ndim == 1
"""
    [rule] = fxrules.parse(text).rules
    assert rule.tolerance is not None
    strict = fxrules.parse(text.replace("@tolerance(atol=0.2, rtol=0)\n", "")).rules[0]
    assert verify_rule(strict, max_examples=30, seed_value=SEED).verdict is Verdict.UNSOUND


@pytest.mark.parametrize(("expected", "actual", "problem"), [
    (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 0.0]), "NaN appears in different places"),
    (torch.tensor([float("inf")]), torch.tensor([1e30]), "inf appears in different places"),
    (torch.ones(2), torch.ones(3), "shape (3,) differs from the pattern's (2,)"),
    (torch.ones(2), torch.ones(2, dtype=torch.float64), "dtype torch.float64 differs from the pattern's torch.float32"),
    ((torch.ones(1), torch.ones(1)), (torch.ones(1),), "the pattern returns 2 values but the replacement returns 1 "
                                                         "values"),
])
def test_compare_rules(expected: object, actual: object, problem: str) -> None:
    result = compare(expected, actual, None)
    assert result is not None and result[0] == problem


def test_compare_accepts_equal_nans_and_tiny_float_noise() -> None:
    nan = float("nan")
    assert compare(torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0 + 1e-7]), None) is None


def test_bundled_rulesets_are_sound() -> None:
    report = fxrules.verify(["algebra.fxr", "fusions.fxr"], max_examples=max(10, EXAMPLES // 3), seed=SEED)
    assert all(r.sound for r in report.results), str(report)


@pytest.mark.slow
def test_bundled_rulesets_are_sound_at_the_default_count() -> None:
    report = fxrules.verify(["algebra.fxr", "fusions.fxr"], seed=SEED,
                            max_examples=slow_examples(100))
    assert all(r.sound for r in report.results), str(report)


def test_cli_verify_exit_codes_and_json(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    bad = Path(str(tmp_path)) / "bad.fxr"
    bad.write_text(WRONG_RULES["relu_is_abs"] + "\n")
    assert main(["verify", str(bad), "--examples", "20", "--seed", "1", "--no-prove"]) == 1
    out = capsys.readouterr().out
    assert "relu_is_abs: unsound: values differ beyond tolerance" in out
    assert out.strip().endswith("1 rule: 0 sound, 1 unsound, 0 inconclusive, 0 errors (seed 1)")
    assert main(["verify", "algebra.fxr", "--examples", "5", "--seed", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {d["verdict"] for d in data["rules"]} <= {"sound", "proved"}


pytest_plugins = ["pytester"]


def test_pytest_plugin_collects_rules_as_items(pytester: pytest.Pytester) -> None:
    pytester.makefile(".fxr", rules="rule good: torch.relu(torch.relu(x)) => torch.relu(x)\n"
                                    "rule bad: torch.relu(x) => torch.abs(x)\n"
                                    "rule odd: torch.relu(x) => x where x.ndim > 10\n")
    result = pytester.runpytest("--fxrules", ".", "--fxrules-examples", "20", "-v", "--fxrules-no-prove",
                                "--hypothesis-seed", "3")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*rules.fxr::good PASSED*", "*rules.fxr::bad FAILED*", "*rules.fxr::odd SKIPPED*"])
    result.stdout.fnmatch_lines(["*bad: unsound: values differ beyond tolerance*"])
    selected = pytester.runpytest("--fxrules", ".", "--fxrules-examples", "10", "-k", "good")
    selected.assert_outcomes(passed=1, deselected=2)
