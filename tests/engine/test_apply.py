"""apply(): the driver's contract — passes, report, metadata, errors, and all or nothing."""

from __future__ import annotations

import operator
import re

import pytest
import torch
import torch.fx

import fxrules
from fxrules.engine.report import StopReason
from fxrules.rewrite import lint
from fxrules.rewrite import rewriter as rewriter_module
from tests.conftest import assert_rewrites, fold_rule, ops, trace

F = torch.nn.functional


def snapshot(gm: torch.fx.GraphModule) -> tuple[str, list[tuple[str, str, object]], list[str], list[str]]:
    """Everything 'exactly as it was' means: code, nodes, submodules, attributes."""
    nodes = [(n.name, n.op, n.target) for n in gm.graph.nodes]
    return gm.code, nodes, [name for name, _ in gm.named_modules()], sorted(gm.state_dict())


class ConvBN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def conv_bn_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = ConvBN()
    model.bn.running_mean.uniform_(-1, 1)
    model.bn.running_var.uniform_(0.5, 2.0)
    return model.eval()


def test_passes_repeat_until_fixpoint() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(torch.neg(torch.neg(x)))) + 1

    report = assert_rewrites(f, "rule double_neg: torch.neg(torch.neg(x)) => x", [torch.randn(4)], ["add"])
    assert report.fired("double_neg") == 2
    assert report.nodes_before == 7 and report.nodes_after == 3


def test_no_node_in_two_matches_of_one_pass() -> None:
    # neg(neg(neg(x))): both the inner and the outer pair match; topological order takes the inner one.
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(torch.neg(x)))

    report = assert_rewrites(f, "rule double_neg: torch.neg(torch.neg(x)) => x", [torch.randn(4)], ["neg"])
    assert report["double_neg"].anchors == ("neg_1",)


def test_rules_at_one_anchor_are_tried_in_file_order() -> None:
    rules = """
rule first: torch.relu(x) => torch.sigmoid(x)
rule second: torch.relu(x) => torch.tanh(x)
"""
    assert_rewrites(lambda x: torch.relu(x) * 0 + torch.sigmoid(x) * 0, rules, [torch.randn(3)],
                    ["sigmoid", "mul", "sigmoid", "mul", "add"], fired={"first": 1})


def test_nothing_fires_leaves_the_module_untouched() -> None:
    gm = trace(lambda x: torch.relu(x) + 1)
    before = snapshot(gm)
    graph = gm.graph
    report = fxrules.apply(gm, fxrules.parse("rule r: torch.neg(torch.neg(x)) => x"))
    assert report.total_fired == 0 and report.passes == 1
    assert gm.graph is graph
    assert snapshot(gm) == before


def test_non_convergence_names_the_rules_and_leaves_the_graph() -> None:
    rules = """
rule grow: torch.relu(x) => torch.relu(torch.relu(x))
"""
    gm = trace(lambda x: torch.relu(x))
    before = snapshot(gm)
    with pytest.raises(fxrules.FxrConvergenceError, match=r"max_passes=5 passes: grow;"):
        fxrules.apply(gm, fxrules.parse(rules), max_passes=5)
    assert snapshot(gm) == before


def test_a_run_stopped_by_the_pass_limit_reports_what_its_undone_passes_did() -> None:
    """The convergence error carries the report of the passes (stop reason ``pass limit``, in the table and
    the JSON); the graph is as it was, so the node counts are equal."""
    gm = trace(lambda x: torch.relu(x))
    with pytest.warns(fxrules.FxrLoopWarning), pytest.raises(fxrules.FxrConvergenceError) as raised:
        fxrules.apply(gm, fxrules.parse("rule grow: torch.relu(x) => torch.relu(torch.relu(x))\n"), max_passes=3)
    report = raised.value.report
    assert report.stop_reason is StopReason.PASS_LIMIT and report.to_dict()["stop_reason"] == "pass limit"
    assert (report.passes, report.fired("grow")) == (4, 1 + 2 + 4 + 8)  # pass 4 finds the rule still firing
    assert (report.nodes_before, report.nodes_after) == (3, 3)
    assert re.search(r"^15 rewrites in 4 passes; nodes 3 -> 3; .* ms; stopped: pass limit$", str(report), re.M)


def test_a_run_that_reaches_its_fixpoint_says_so() -> None:
    report = fxrules.apply(trace(lambda x: torch.neg(torch.neg(x)).exp()), "algebra.fxr")
    assert report.stop_reason is StopReason.FIXPOINT and "stopped" not in str(report)


def test_replacement_metadata_stack_trace_and_provenance() -> None:
    gm = trace(lambda x: torch.neg(torch.neg(x)).relu() * 2)
    for node in gm.graph.nodes:
        node.meta["stack_trace"] = f"trace of {node.name}"
        node.meta["nn_module_stack"] = {"blk": ("blk", torch.nn.Module)}
    rules = fxrules.parse("rule relu_to_sigmoid: x.relu() => torch.sigmoid(x)", filename="mem.fxr")
    fxrules.apply(gm, rules)
    new = next(n for n in gm.graph.nodes if n.target is torch.sigmoid)
    assert new.meta["stack_trace"] == "trace of relu"
    assert new.meta["nn_module_stack"] == {"blk": ("blk", torch.nn.Module)}
    assert new.meta["fxrules"] == {"rule": "relu_to_sigmoid", "file": "mem.fxr", "line": 1}


def test_replacement_output_takes_shape_metadata_of_the_replaced_output() -> None:
    gm = trace(lambda x: torch.relu(torch.transpose(torch.transpose(x, 0, 1), 0, 1)).sum(0))
    x = torch.randn(2, 3)
    fxrules.apply(gm, fxrules.parse("rule r: torch.relu(x) => F.relu(x)"), example_inputs=[x])
    new = next(n for n in gm.graph.nodes if n.target is F.relu)
    (placeholder,) = gm.graph.find_nodes(op="placeholder")
    assert new.meta["val"].shape == placeholder.meta["val"].shape  # the same symbols: (s0, s1), not (2, 3)
    assert [size.node.hint for size in new.meta["val"].shape] == [2, 3]


def test_inner_new_nodes_get_propagated_metadata() -> None:
    gm = trace(lambda x: torch.relu(x))
    fxrules.apply(gm, fxrules.parse("rule r: torch.relu(x) => torch.sigmoid(torch.neg(x))"),
                  example_inputs=[torch.randn(5, 2)])
    inner = next(n for n in gm.graph.nodes if n.target is torch.neg)
    (placeholder,) = gm.graph.find_nodes(op="placeholder")
    assert inner.meta["val"].shape == placeholder.meta["val"].shape
    assert inner.meta["val"].dtype == torch.float32


def test_replacement_may_return_a_literal() -> None:
    rules = "rule times_zero_int: torch.mul(x, 0) => 0"
    gm = trace(lambda x: torch.mul(x, 0) + torch.ones(2))
    fxrules.apply(gm, fxrules.parse(rules))
    add = next(n for n in gm.graph.nodes if n.target is operator.add)
    assert add.args[0] == 0
    torch.testing.assert_close(gm(torch.randn(2)), torch.ones(2))


def test_plain_module_is_rejected_with_advice() -> None:
    with pytest.raises(fxrules.FxrUsageError, match=r"torch.fx.symbolic_trace\(model\)"):
        fxrules.apply(torch.nn.ReLU(), "algebra.fxr")


def test_rules_of_the_wrong_type_are_rejected() -> None:
    gm = trace(lambda x: x + 1)
    with pytest.raises(fxrules.FxrUsageError, match="rules must be a path, a bundled ruleset name"):
        fxrules.apply(gm, 42)  # type: ignore[arg-type]
    with pytest.raises(fxrules.FxrUsageError, match=r"no rule file 'nonexistent\.fxr'"):
        fxrules.apply(gm, "nonexistent.fxr")


def test_graph_failing_lint_is_refused_before_any_rewrite() -> None:
    gm = trace(lambda x: torch.neg(torch.neg(x)) + torch.relu(x))
    relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
    relu.args = (relu,)  # a self-loop: lint must fail
    with pytest.raises(fxrules.FxrUsageError, match="fails lint"):
        fxrules.apply(gm, "algebra.fxr")
    assert relu.args == (relu,)


def test_graph_nothing_fires_on_is_not_linted_or_touched() -> None:
    gm = trace(lambda x: torch.relu(x))
    relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
    relu.args = (relu,)
    report = fxrules.apply(gm, fxrules.parse("rule r: torch.neg(torch.neg(x)) => x"))
    assert report.total_fired == 0 and relu.args == (relu,)


def test_a_list_of_rulesets_is_applied_together() -> None:
    gm = trace(lambda x: (torch.neg(torch.neg(x)) * 1).exp())
    report = fxrules.apply(gm, ["algebra.fxr", fxrules.parse("rule extra: torch.relu(x) => x")],
                           example_inputs=[torch.randn(3)])
    assert report.counts() == {"double_neg": 1, "mul_one": 1}
    assert ops(gm) == ["method:exp"]


def test_a_rule_name_in_two_of_the_rulesets_is_an_error() -> None:
    gm = trace(lambda x: torch.neg(torch.neg(x)))
    mine = fxrules.parse("rule double_neg:\n    torch.neg(torch.neg(x)) => torch.relu(x)\n", "mine.fxr")
    with pytest.raises(fxrules.FxrUsageError) as error:
        fxrules.apply(gm, ["algebra.fxr", mine])
    assert str(error.value) == ("rule double_neg is defined twice: at rulesets/algebra.fxr:6:6 and at mine.fxr:1:6; "
                                "rule names key the report, so give each rule its own")


# ---------------------------------------------------------------- all or nothing


def test_helper_that_raises_leaves_gm_exactly_as_it_was() -> None:
    def broken(conv: torch.nn.Module, bn: torch.nn.Module) -> torch.nn.Module:
        raise RuntimeError("cannot fold")

    gm = torch.fx.symbolic_trace(conv_bn_model())
    before = snapshot(gm)
    rules = fold_rule("fold", "broken")
    with pytest.raises(fxrules.FxrApplyError, match=r"rule fold failed at node 'bn': RuntimeError: cannot fold"):
        fxrules.apply(gm, fxrules.parse(rules), helpers={"broken": broken})
    assert snapshot(gm) == before


def test_failure_after_helpers_added_modules_removes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = torch.fx.symbolic_trace(conv_bn_model())
    before = snapshot(gm)
    rules = fxrules.parse(fold_rule("fold", "fold_conv_bn"))

    calls = {"n": 0}
    real_lint = lint.lint

    def lint_fails_once(graph: torch.fx.Graph) -> None:
        calls["n"] += 1
        if calls["n"] == 1:  # the lint of the rewritten graph, before the commit
            raise RuntimeError("injected lint failure")
        real_lint(graph)

    monkeypatch.setattr(lint, "lint", lint_fails_once)
    with pytest.raises(fxrules.FxrApplyError, match="injected lint failure"):
        fxrules.apply(gm, rules)
    monkeypatch.undo()
    assert snapshot(gm) == before
    assert not hasattr(gm, "fold_conv_bn")


def test_internal_error_mid_rewrite_leaves_gm_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = trace(lambda x: torch.neg(torch.neg(x)) + torch.neg(torch.neg(x * 2)))
    before = snapshot(gm)
    real = rewriter_module.Rewriter._redirect
    calls = {"n": 0}

    def second_call_fails(self: object, *args: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyError("injected")
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(rewriter_module.Rewriter, "_redirect", second_call_fails)
    with pytest.raises(fxrules.FxrApplyError, match=r"rule double_neg failed at node 'neg_3': KeyError"):
        fxrules.apply(gm, "algebra.fxr")
    assert snapshot(gm) == before


def test_literal_generated_code_cannot_spell_is_refused_while_undoable() -> None:
    class Opaque:
        pass

    gm = trace(lambda x: torch.sum(torch.neg(torch.neg(x)), -1))
    before = snapshot(gm)
    rules = fxrules.parse("""
rule double_neg: torch.neg(torch.neg(x)) => x
rule opaque_dim:
    pattern:
        return torch.sum(x, -1)
    replace:
        return torch.sum(x, @opaque())
""")
    with pytest.raises(fxrules.FxrApplyError, match=r"helper '@opaque' returned Opaque, which cannot be inlined"):
        fxrules.apply(gm, rules, helpers={"opaque": Opaque})
    assert snapshot(gm) == before
    torch.testing.assert_close(gm(torch.ones(2)), torch.full((), 2.0))


def test_unknown_helper_is_an_error_with_the_rule_location() -> None:
    gm = trace(lambda x: torch.relu(x))
    text = "rule r:\n    pattern:\n        return torch.relu(x)\n    replace:\n        return @nope(x)\n"
    rules = fxrules.parse(text, filename="h.fxr")
    with pytest.raises(fxrules.FxrApplyError, match=r"h.fxr:5:16: rule r calls unknown helper '@nope'"):
        fxrules.apply(gm, rules)


# ---------------------------------------------------------------- modules and helpers


def test_conv_bn_folding_adds_fresh_submodule_and_deletes_unused_ones() -> None:
    model = conv_bn_model()
    gm = torch.fx.symbolic_trace(model)
    gm.fold_conv_bn = torch.nn.Identity()  # an existing attribute the fresh name must avoid
    x = torch.randn(2, 3, 8, 8)
    expected = gm(x)
    report = fxrules.apply(gm, "fusions.fxr")
    assert report.counts() == {"fold_conv2d_bn": 1}
    assert ops(gm) == ["module:Conv2d", "relu"]
    folded = next(n for n in gm.graph.nodes if n.op == "call_module")
    assert folded.target == "fold_conv_bn_1"
    assert not hasattr(gm, "bn") and not hasattr(gm, "conv")
    torch.testing.assert_close(gm(x), expected)


def test_report_table_and_dict() -> None:
    gm = trace(lambda x: torch.neg(torch.neg(x)) * 1)
    report = fxrules.apply(gm, "algebra.fxr")
    text = str(report)
    assert text.splitlines()[0].split() == ["rule", "fired", "skipped", "where"]
    assert any(line.split()[:3] == ["double_neg", "1", "0"] for line in text.splitlines())
    data = report.to_dict()
    assert data["rules"][0]["name"] == "double_neg" and data["rules"][0]["fired"] == 1
    assert data["stop_reason"] == "fixpoint"
    assert re.search(r"^1 rewrite in 2 passes; nodes 5 -> 3; ", text, re.MULTILINE), text


def test_report_summary_counts_in_the_singular_when_one() -> None:
    rules = fxrules.parse("rule r: torch.neg(torch.neg(x)) => x")
    report = fxrules.apply(trace(lambda x: torch.neg(torch.neg(torch.neg(torch.neg(x)))).exp()), rules)
    assert re.search(r"^2 rewrites in 2 passes; ", str(report), re.MULTILINE), str(report)
    nothing = fxrules.apply(trace(lambda x: torch.relu(x)), rules)
    assert re.search(r"^0 rewrites in 1 pass; ", str(nothing), re.MULTILINE), str(nothing)


# ---------------------------------------------------------------- rejection


def test_escaping_interior_user_is_skipped_and_reported() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inner = torch.neg(x)
        return torch.neg(inner), inner * 3

    gm = trace(f)
    report = fxrules.apply(gm, fxrules.parse("rule double_neg: torch.neg(torch.neg(x)) => x"))
    assert report.total_fired == 0
    skipped = report["double_neg"].skipped
    assert [(s.reason, s.node) for s in skipped] == [("escaping user", "neg_1")]
    assert "'neg' is also used by mul outside the match" in skipped[0].detail


def test_impure_node_not_named_by_the_pattern_is_kept() -> None:
    class Impure(torch.nn.Module):
        _is_impure = True

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.side = Impure()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.neg(self.side(x))

    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: torch.nn.Module, name: str) -> bool:
            return isinstance(m, Impure) or super().is_leaf_module(m, name)

    model = M()
    gm = torch.fx.GraphModule(model, Tracer().trace(model))
    rules = """
rule drop:
    given:
        m: nn.Module
    pattern:
        return torch.neg(m(x))
    replace:
        return x
"""
    report = fxrules.apply(gm, fxrules.parse(rules))
    assert report.total_fired == 0
    assert [s.reason for s in report["drop"].skipped] == ["impure"]


def test_explain_records_near_misses() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.sum(x, 1), torch.sub(y, torch.relu(x)), x * 2)

    rules = """
rule one_arg: torch.sum(x, 0) => x
rule swapped: torch.sub(torch.relu(x), y) => torch.zeros_like(x)
rule literal: x * 3 => x
"""
    gm = trace(f)
    report = fxrules.apply(gm, fxrules.parse(rules, filename="m.fxr"), explain=True)
    assert report.total_fired == 0
    one_arg = report["one_arg"].near_misses[0]
    assert (one_arg.condition, one_arg.detail) == ("literal", "expected 0, found 1")
    assert str(one_arg.span) == "m.fxr:2:28"
    swapped = report["swapped"].near_misses[0]
    assert (swapped.condition, swapped.detail) == ("target", "expected torch.relu, found placeholder y 'y'")
    assert str(swapped.span) == "m.fxr:3:25"
    literal = report["literal"].near_misses[0]
    assert (literal.condition, literal.detail) == ("literal", "expected 3, found 2")
