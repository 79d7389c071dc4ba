"""Rules of every form resolve into the rule IR they describe; loading, includes and the cache."""

from __future__ import annotations

import math
import operator
import time
from pathlib import Path

import pytest
import torch

import fxrules
from fxrules.lang.ir import (
    AltTemplate,
    Capture,
    DimRest,
    DimSymbol,
    HelperTemplate,
    Literal,
    ModuleType,
    OpKind,
    OpTemplate,
    SeqTemplate,
    TensorType,
    Wildcard,
    walk,
)

aten = torch.ops.aten


def only_rule(text: str) -> fxrules.Rule:
    [rule] = fxrules.parse(text).rules
    return rule


def test_one_line_rule_structure() -> None:
    rule = only_rule("rule double_neg:\n    torch.neg(torch.neg(x)) => x\n")
    [outer] = rule.pattern
    assert isinstance(outer, OpTemplate) and outer.kind is OpKind.FUNCTION and outer.target is torch.neg
    [inner] = outer.args
    assert isinstance(inner, OpTemplate) and inner.target is torch.neg
    assert inner.args == (Capture("x", inner.args[0].span),)
    assert dict(outer.bound or {}) == {"input": inner}
    assert rule.replacement == (Capture("x", rule.replacement[0].span),)
    assert rule.anchor_keys() == (("call_function", torch.neg),)


def test_infix_operators_resolve_to_operator_functions() -> None:
    rule = only_rule("rule r: -a + b * c - d / e @ f ** 2 => a")
    targets = {t.target for t in _ops(rule.pattern[0])}
    assert targets == {operator.neg, operator.add, operator.mul, operator.sub, operator.truediv, operator.matmul,
                       operator.pow}


def test_literals_of_every_kind() -> None:
    rule = only_rule('rule r: F.pad(x, [1, -2], "constant", -1.5) + torch.full((2,), nan, dtype=torch.float16)'
                     " + torch.gt(x, inf) + torch.eq(x, True) + torch.ne(x, None) => x")
    literals = [t for t in _walk(rule.pattern[0]) if isinstance(t, Literal)]
    values = [lit.value for lit in literals]
    assert 1 in values and -2 in values and "constant" in values and -1.5 in values
    assert torch.float16 in values and True in values and None in values and math.inf in values
    assert any(isinstance(v, float) and math.isnan(v) for v in values)
    assert any(isinstance(t, SeqTemplate) and not t.is_tuple for t in _walk(rule.pattern[0]))


def test_indexing_and_slices_become_getitem() -> None:
    rule = only_rule("rule r: x[:, 0] + x[1:] => x")
    getitems = [t for t in _ops(rule.pattern[0]) if t.target is operator.getitem]
    indices = sorted((t.args[1] for t in getitems), key=lambda i: isinstance(i, SeqTemplate))
    assert indices[0] == Literal(slice(1, None, None), indices[0].span)
    assert isinstance(indices[1], SeqTemplate) and indices[1].is_tuple
    assert [i.value for i in indices[1].items] == [slice(None, None, None), 0]  # type: ignore[union-attr]


def test_method_call_family_alternatives_wildcard_and_rest() -> None:
    rule = only_rule("rule r: x.transpose(0, 1) | relu(_) | torch.sum(x, ...) => 0.0")
    [alt] = rule.pattern
    assert isinstance(alt, AltTemplate)
    method, family, rest = alt.options
    assert isinstance(method, OpTemplate) and method.kind is OpKind.METHOD and method.target == "transpose"
    assert isinstance(family, OpTemplate) and family.kind is OpKind.FAMILY and family.target.name == "relu"
    assert isinstance(family.args[0], Wildcard)
    assert isinstance(rest, OpTemplate) and rest.rest and rest.target is torch.sum
    keys = set(rule.anchor_keys())
    assert ("call_method", "transpose") in keys and ("call_function", torch.sum) in keys
    assert {("call_function", torch.relu), ("call_function", torch.nn.functional.relu),
            ("call_method", "relu"), ("call_module", torch.nn.ReLU), ("call_function", aten.relu.default)} <= keys


def test_block_rule_with_given_dag_and_multiple_outputs() -> None:
    text = """
rule addmm:
    given:
        a: Tensor[M, K]
        w: Tensor[K, N, dtype=float32]
        b: Tensor[..., N]
    pattern:
        y = torch.matmul(a, w)
        return y + b
    replace:
        return torch.addmm(b, a, w)

rule split_sum_of_cat:
    pattern:
        c = torch.cat([u, v])
        return c.sum(), c.mean()
    where:
        u.ndim == 1 and v.ndim == 1
    replace:
        s = u.sum() + v.sum()
        return s, s / (u.numel() + v.numel())
"""
    addmm, split = fxrules.parse(text).rules
    assert addmm.types["a"] == TensorType((DimSymbol("M"), DimSymbol("K")), None, addmm.types["a"].span)
    assert addmm.types["w"].dtypes == (torch.float32,)  # type: ignore[union-attr]
    assert addmm.types["b"].dims == (DimRest(), DimSymbol("N"))  # type: ignore[union-attr]
    [add] = addmm.pattern
    assert isinstance(add, OpTemplate) and add.target is operator.add and add.commutative
    assert isinstance(add.args[0], OpTemplate) and add.args[0].name == "y"
    total, mean = split.pattern
    assert isinstance(total, OpTemplate) and isinstance(mean, OpTemplate)
    assert total.args[0] is mean.args[0]  # the shared interior node `c` is one object
    assert split.guard is not None and split.guard.reads == frozenset({"u", "v"})
    s, ratio = split.replacement
    assert isinstance(ratio, OpTemplate) and ratio.args[0] is s


def test_module_capture_and_helper_call() -> None:
    rule = only_rule("""
rule fold_conv_bn:
    given:
        c: nn.Conv2d
        bn: nn.BatchNorm2d
    pattern:
        return bn(c(x))
    where:
        not bn.training and bn.track_running_stats
    replace:
        return @fold_conv_bn(c, bn)(x)
""")
    [bn] = rule.pattern
    assert isinstance(bn, OpTemplate) and bn.kind is OpKind.MODULE and bn.target is torch.nn.BatchNorm2d
    assert bn.binds == "bn" and isinstance(bn.args[0], OpTemplate) and bn.args[0].binds == "c"
    assert rule.types["c"] == ModuleType(torch.nn.Conv2d, rule.types["c"].span)
    [call] = rule.replacement
    assert isinstance(call, OpTemplate) and isinstance(call.target, HelperTemplate)
    assert call.target.name == "fold_conv_bn"
    assert rule.anchor_keys() == (("call_module", torch.nn.BatchNorm2d),)


def test_use_family_commutative_and_tolerance() -> None:
    text = """
use torch.nn.functional as G
family act = G.relu | torch.Tensor.relu | nn.ReLU
commutative torch.maximum

@tolerance(atol=1e-3, rtol=0)
rule r: act(torch.maximum(x, y)) => x
"""
    rule = only_rule(text)
    [act] = rule.pattern
    assert isinstance(act, OpTemplate) and act.kind is OpKind.FAMILY
    assert [str(m) for m in act.target.members] == ["torch.nn.functional.relu", "Tensor.relu",
                                                   "torch.nn.modules.activation.ReLU"]
    maximum = act.args[0]
    assert isinstance(maximum, OpTemplate) and maximum.commutative
    assert rule.tolerance is not None and (rule.tolerance.atol, rule.tolerance.rtol) == (1e-3, 0)


def test_include_brings_rules_in_place_and_include_cycle_is_named(tmp_path: Path) -> None:
    (tmp_path / "a.fxr").write_text('rule a1: torch.relu(x) => x\ninclude "b.fxr"\nrule a2: torch.tanh(x) => x\n')
    (tmp_path / "b.fxr").write_text("rule b1: torch.sigmoid(x) => x\n")
    ruleset = fxrules.load(tmp_path / "a.fxr")
    assert [r.name for r in ruleset] == ["a1", "b1", "a2"]
    (tmp_path / "b.fxr").write_text('include "a.fxr"\n')
    with pytest.raises(fxrules.FxrLoadError, match=r"include cycle: a.fxr -> b.fxr -> a.fxr"):
        fxrules.load(tmp_path / "a.fxr")


def test_include_of_a_bundled_ruleset_and_non_fxr_refused() -> None:
    ruleset = fxrules.parse('include "algebra.fxr"\nrule mine: torch.relu(x) => x\n')
    assert ruleset.rules[-1].name == "mine" and len(ruleset) == len(fxrules.load("algebra.fxr")) + 1
    with pytest.raises(fxrules.FxrLoadError, match=r"include must name a .fxr file, not '/etc/passwd'"):
        fxrules.parse('include "/etc/passwd"\n')


def test_loading_is_cached_by_content(tmp_path: Path) -> None:
    path = tmp_path / "r.fxr"
    path.write_text("rule r: torch.relu(x) => x\n")
    first = fxrules.load(path)
    assert fxrules.load(path) is first
    path.write_text("rule r: torch.relu(x) => x\nrule s: torch.tanh(x) => x\n")
    second = fxrules.load(path)
    assert second is not first and len(second) == 2


def test_ruleset_prints_readably() -> None:
    text = str(fxrules.load("algebra.fxr"))
    assert text.splitlines()[0] == f"RuleSet rulesets/algebra.fxr: {len(fxrules.load('algebra.fxr'))} rules"
    assert "double_neg" in text.splitlines()[1]


def test_generated_500_rule_file_parses_quickly_and_cached_instantly() -> None:
    lines = [f"rule r{i}: torch.neg(torch.relu(x) * {i} + y) => x" for i in range(500)]
    text = "\n".join(lines) + "\n"
    started = time.perf_counter()
    ruleset = fxrules.parse(text, filename="gen500.fxr")
    cold = time.perf_counter() - started
    started = time.perf_counter()
    again = fxrules.parse(text, filename="gen500.fxr")
    cached = time.perf_counter() - started
    assert len(ruleset) == 500 and again is ruleset
    assert cold < 20.0 and cached < 0.05


def _walk(template: object) -> list[object]:
    return list(walk(template))  # type: ignore[arg-type]


def _ops(template: object) -> list[OpTemplate]:
    return [t for t in _walk(template) if isinstance(t, OpTemplate)]


def test_loop_warnings_for_self_matching_and_mutually_undoing_rules() -> None:
    text = """
rule grow: torch.relu(x) => torch.relu(torch.relu(x))
rule a: torch.sigmoid(x) => F.sigmoid(x)
rule b: F.sigmoid(x) => torch.sigmoid(x)
rule fine: torch.neg(torch.neg(x)) => x
"""
    with pytest.warns(fxrules.FxrLoopWarning) as caught:
        ruleset = fxrules.parse(text, filename="loops.fxr")
    assert [w.render().splitlines()[0] for w in ruleset.warnings] == [
        "loops.fxr:2:6: warning: rule grow: its pattern matches its own replacement, so it may fire forever",
        "loops.fxr:3:6: warning: rules a and b undo each other, so they may fire forever",
    ]
    assert len(caught) == 2


def test_loop_warnings_decide_on_the_operations_when_types_need_metadata() -> None:
    text = """
rule sum_and_mean:
    given:
        x: Tensor[N, ...]
    pattern:
        return torch.sum(x, 0), torch.mean(x, 0)
    replace:
        s = torch.sum(x, 0)
        return s, s / x.shape[0]

rule typed_grow:
    given:
        x: Tensor[N]
    pattern:
        return torch.relu(x)
    replace:
        return torch.relu(torch.relu(x))
"""
    with pytest.warns(fxrules.FxrLoopWarning):  # typed_grow's; the sum stays, but without torch.mean: no loop
        ruleset = fxrules.parse(text, filename="typed.fxr")
    assert [w.render().splitlines()[0] for w in ruleset.warnings] == [
        "typed.fxr:11:6: warning: rule typed_grow: its pattern matches its own replacement, so it may fire forever",
    ]


def test_bundled_rulesets_have_no_loop_warnings() -> None:
    for name in ("algebra.fxr", "fusions.fxr"):
        assert fxrules.load(name).warnings == ()
