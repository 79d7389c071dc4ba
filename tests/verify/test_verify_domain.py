"""verify's domain is apply's domain, and "the same" means dtype, shape, values, inputs, aliasing, gradients.

Each rule below is a wrong rule that an older verify (float32 contiguous inputs of small values, compared
within tolerance) called sound; several are bundled rules as they once were. Each must now be found out
by verify on its own: unsound with a counterexample, or sound with the aliasing change named.
"""

from __future__ import annotations

import pytest

import fxrules
from fxrules.lang.ir import Rule
from fxrules.verification.soundness import ALIASING_CONTRACT, RuleVerdict, Verdict, verify_rule
from tests.conftest import EVAL_MODE_FOLD, fold_rule

SEED = 20261201
EXAMPLES = 100


def verdict(text: str, name: str | None = None, examples: int = EXAMPLES) -> RuleVerdict:
    rules = fxrules.parse(text, filename="old.fxr")
    rule: Rule = rules[name] if name else rules.rules[0]
    return verify_rule(rule, max_examples=examples, seed_value=SEED, prove=False)  # what sampling alone finds


def unsound(text: str, name: str | None = None) -> RuleVerdict:
    result = verdict(text, name)
    assert result.verdict is Verdict.UNSOUND, str(result)
    assert result.counterexample is not None
    return result


# ---------------------------------------------------------------- dtypes, values and layouts


def test_div_one_changes_the_dtype_of_an_integer_or_bool_input() -> None:
    """x / 1 is float for an integer or bool x: the identity keeps x's dtype."""
    result = unsound("rule div_one: x / 1 => x")
    assert result.reason == "dtype torch.bool differs from the pattern's torch.float32", str(result)


def test_mul_one_is_wrong_for_bool_inputs_only() -> None:
    """bool * 1 is int64; for every other dtype x * 1 is x."""
    result = unsound("rule mul_one: x * 1 => x")
    assert "torch.bool" in result.counterexample.inputs[0], str(result)


def test_add_zero_turns_negative_zero_positive() -> None:
    """-0.0 + 0 is +0.0 (1/(x + 0) is +inf, 1/x -inf): the bundled add_zero, typed to floats as it was."""
    result = unsound("""
rule add_zero:
    given:
        x: Tensor[dtype=float16|bfloat16|float32|float64]
    pattern:
        return add(x, 0) | add(x, 0.0)
    replace:
        return x
""")
    assert result.reason == "the sign of a zero differs (-0.0 and 0.0)"
    assert "-0.0" in result.counterexample.inputs[0]


DOUBLE_HALVE = """
rule double_halve:
    given:
        x: Tensor[dtype=float16]
    pattern:
        return (x * 2) / 2
    replace:
        return x
"""


def test_a_rule_wrong_only_near_overflow_is_found() -> None:
    """(x * 2) / 2 overflows to inf for float16 values above 32752; x stays finite."""
    result = unsound(DOUBLE_HALVE)
    assert result.reason == "inf appears in different places"


def test_finite_inputs_keeps_values_away_from_overflow() -> None:
    """@finite_inputs() claims soundness for finite inputs of a moderate size: the same rule is sound."""
    result = verdict("@finite_inputs()" + DOUBLE_HALVE)
    assert result.verdict is Verdict.SOUND, str(result)


def test_bool_addition_is_or_not_doubling() -> None:
    """True + True is True (bool addition is logical or), True * 2 is the integer 2."""
    unsound("rule double: x + x => x * 2")


GELU_TANH = '''
@tolerance(atol=1e-5, rtol=1e-4)
@finite_inputs()
rule gelu_tanh:
    pattern:
        cube = pow(x, 3.0)
        inner = mul(0.7978845608028654, add(x, mul(0.044715, cube)))
        return mul(mul(0.5, x), add(1.0, tanh(inner)))
    replace:
        return F.gelu(x, approximate="tanh")
'''

GELU_ERF = '''
@tolerance(atol=1e-6, rtol=1e-5)
@finite_inputs()
rule gelu_erf:
    mul(mul(x, 0.5), add(1.0, erf(div(x, 1.4142135623730951)))) => F.gelu(x)
'''


@pytest.mark.parametrize("text", [GELU_TANH, GELU_ERF], ids=["gelu_tanh", "gelu_erf"])
def test_gelu_formulas_are_unsound_on_integer_inputs(text: str) -> None:
    """The formula computes in float for a bool or integer x; F.gelu has no kernel for them and raises."""
    result = unsound(text)
    assert result.reason.startswith("the replacement raises NotImplementedError: \"GeluKernelImpl\" not "
                                    "implemented for"), str(result)
    assert result.counterexample.inputs[0].startswith("x: Tensor[] torch.bool = ")


def test_gelu_formula_on_floats_only_is_sound() -> None:
    """Typed to float32, what is left is the formula, within the rule's tolerance."""
    text = GELU_ERF.replace("    mul(mul(x, 0.5), add(1.0, erf(div(x, 1.4142135623730951)))) => F.gelu(x)\n", """
    given:
        x: Tensor[dtype=float32]
    pattern:
        return mul(mul(x, 0.5), add(1.0, erf(div(x, 1.4142135623730951))))
    replace:
        return F.gelu(x)
""").replace("rule gelu_erf:\n", "rule gelu_erf:")
    assert verdict(text).verdict is Verdict.SOUND


SDPA_MASKED = '''
@tolerance(atol=1e-5, rtol=1e-4)
@finite_inputs()
rule sdpa_masked_div:
    given:
        q: Tensor[..., L, E]
        k: Tensor[..., S, E]
        v: Tensor[..., S, Ev]
        mask: Tensor[..., M, S]
        s: float
    pattern:
        scaled = div(matmul(q, transpose(k, -1, -2) | transpose(k, -2, -1)), s)
        probs = softmax(add(scaled, mask), -1)
        return matmul(dropout(probs, training=False, ...) | probs, v)
    where:
        1e-6 < s and s < 1e6 and (M == 1 or M == L) and GUARD_TAIL
    replace:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / s)
'''.replace("GUARD_TAIL", "broadcasts_to(mask.shape, scaled.shape) and mask.dtype == q.dtype")


def test_sdpa_turns_a_fully_masked_row_from_nan_into_zeros() -> None:
    """A row whose mask is all -inf is NaN in the eager softmax and 0 in scaled_dot_product_attention.

    The old rule claims @finite_inputs(), which excludes a -inf mask: verify honours the claim, so on its
    own it cannot see the masked row. What it can say: without that (false) claim, and with the tensors
    typed float32 (its other faults are about mixed dtypes), the rule is unsound, with NaN where the
    replacement has numbers.
    """
    text = SDPA_MASKED.replace("@finite_inputs()\n", "")
    for name, dims in (("q", "L, E"), ("k", "S, E"), ("v", "S, Ev"), ("mask", "M, S")):
        text = text.replace(f"{name}: Tensor[..., {dims}]", f"{name}: Tensor[..., {dims}, dtype=float32]")
    result = unsound(text)
    assert result.reason == "NaN appears in different places", str(result)


# ---------------------------------------------------------------- inputs left as the pattern leaves them


def test_a_replacement_that_writes_into_its_input_is_unsound() -> None:
    result = unsound("rule r: torch.add(x, 1) => x.add_(1)")
    assert result.reason == "input x is left different from how the pattern leaves it"


# ---------------------------------------------------------------- aliasing


def aliasing(text: str, examples: int = EXAMPLES) -> tuple[str, ...]:
    result = verdict(text, examples=examples)
    assert result.verdict is Verdict.SOUND, str(result)
    assert ALIASING_CONTRACT in str(result)
    return result.aliasing


def test_identity_rewrites_report_that_the_output_is_the_input() -> None:
    """double_neg as bundled: sound, but the result becomes the input object itself."""
    changes = aliasing("rule double_neg:\n    neg(neg(x)) => x\n")
    assert changes == ("output 0 is input x (in the pattern: a new tensor)",)


def test_reshape_chain_turns_a_copy_into_a_view() -> None:
    """reshape of a non-contiguous x copies; one reshape of x to the last shape may be a view of x."""
    changes = aliasing("rule reshape_chain:\n    reshape(reshape(x, a), b) => reshape(x, b)\n", examples=200)
    assert "output 0 is a view of input x (in the pattern: a new tensor)" in changes


def test_clone_single_use_removes_a_snapshot() -> None:
    """a.detach().clone() is a snapshot; without the clone, a later write into a shows through it.

    The guard's structural conditions (one user, computed, not written in place) are about the graph
    around the match: verify takes them as holding and reports what the rule changes.
    """
    changes = aliasing('''
rule clone_single_use:
    pattern:
        c = x.clone() | torch.clone(x) | aten.clone.default(x)
        return c
    where:
        num_users(x) == 1 and is_computed(x) and not x.requires_grad and not is_mutated(c)
    replace:
        return x
''')
    assert changes == ("output 0 is input x (in the pattern: a new tensor)",)


def test_a_rule_that_keeps_aliasing_reports_none() -> None:
    result = verdict("rule relu_idempotent:\n    relu(relu(x)) => relu(x)\n")
    assert result.verdict is Verdict.SOUND and result.aliasing == ()
    assert str(result) == f"old.fxr:1:6: relu_idempotent: sound ({result.examples} examples)"


# ---------------------------------------------------------------- gradients


def test_a_rewrite_that_cuts_the_gradient_is_unsound() -> None:
    result = unsound("rule r: torch.relu(x) => F.relu(x.detach())")
    assert result.reason == "output 0 is not differentiable in the replacement, unlike in the pattern"


def test_a_rewrite_that_changes_the_gradient_value_is_unsound() -> None:
    """abs and sqrt(x * x) agree on finite inputs; at 0 the gradient is 0 for one, NaN for the other."""
    text = "@finite_inputs()\nrule r:\n    given:\n        x: Tensor[dtype=float32]\n" \
           "    pattern:\n        return torch.abs(x)\n    replace:\n        return torch.sqrt(x * x)\n"
    result = unsound(text)
    assert result.reason == "the gradient with respect to x: NaN appears in different places"
    assert verdict("@no_grad_check()\n" + text).verdict is Verdict.SOUND


# ---------------------------------------------------------------- what a counterexample shows


def test_counterexample_shows_strides_and_views() -> None:
    """view() needs compatible strides: the counterexample is a non-contiguous input, shown with its strides."""
    result = unsound("rule r: x.reshape(-1) => x.view(-1)")
    assert result.reason.startswith("the replacement raises RuntimeError")
    [line] = result.counterexample.inputs
    assert " strides (" in line, line
    assert "as_strided(" in result.counterexample.reproduction or "empty_strided(" in \
        result.counterexample.reproduction


# ---------------------------------------------------------------- what verify cannot see


def test_fold_conv2d_bn_is_verified_on_the_declared_class_only() -> None:
    """apply matches any instance of nn.Conv2d, a subclass that computes differently (weight
    standardization, spectral norm) included; verify can only build the declared class itself, so it
    cannot find that subclass. What it can say about nn.Conv2d itself: the fold rounds differently from
    the two layers, beyond float32's tolerance for inputs near overflow, and the rule claims exactness."""
    result = verdict(fold_rule("fold_conv2d_bn", "fold_conv_bn", EVAL_MODE_FOLD), examples=40)
    assert result.verdict is Verdict.UNSOUND, str(result)
    assert result.reason == "values differ beyond tolerance"
    assert result.counterexample is not None
    assert any(line.startswith("c = Conv2d(") for line in result.counterexample.inputs)
