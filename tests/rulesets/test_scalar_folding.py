"""algebra.fxr folds Python arithmetic on literal numbers in the graph, within the literal bound."""

from __future__ import annotations

import operator

import torch
import torch.fx

import fxrules


def _graph(*calls: tuple[object, tuple[object, ...]]) -> tuple[torch.fx.GraphModule, list[torch.fx.Node]]:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    nodes = [graph.call_function(target, args) for target, args in calls]  # type: ignore[arg-type]
    graph.output((x, *nodes))
    return torch.fx.GraphModule(torch.nn.Module(), graph), nodes


def test_arithmetic_on_literals_folds_to_its_value() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    quotient = graph.call_function(operator.floordiv, (8, 4))
    product = graph.call_function(operator.mul, (2, 3))
    total = graph.call_function(operator.add, (quotient, product))
    graph.output(graph.call_method("view", (x, total, -1)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    report = fxrules.apply(gm, "algebra.fxr")
    assert report.counts() == {"fold_scalar_add": 1, "fold_scalar_mul": 1, "fold_scalar_floordiv": 1}
    assert "view = x.view(8, -1)" in gm.code
    assert gm(torch.arange(16.0)).shape == (8, 2)


def test_every_operator_folds_as_python_computes_it() -> None:
    calls = [(operator.sub, (2, 5)), (operator.truediv, (7, 2)), (operator.mod, (-7, 3)), (operator.pow, (64, -0.5)),
             (operator.neg, (1.5,)), (operator.mul, (-0.0, 1)), (operator.add, (True, 2))]
    gm, _ = _graph(*calls)
    fxrules.apply(gm, "algebra.fxr", only="fold_*")
    outputs = gm(torch.zeros(1))[1:]
    assert [repr(value) for value in outputs] == [repr(target(*args)) for target, args in calls]
    assert all(node.op != "call_function" for node in gm.graph.nodes)


def test_what_cannot_be_folded_stays_in_the_graph_with_its_reason() -> None:
    gm, _ = _graph((operator.truediv, (1, 0)), (operator.pow, (2, 100000)), (operator.pow, (-8, 1 / 3)))
    report = fxrules.apply(gm, "algebra.fxr", only="fold_*")
    assert report.counts() == {}
    skipped = {(rule.name, skip.reason.value) for rule in report.rules for skip in rule.skipped}
    assert skipped == {("fold_scalar_truediv", "fold error"), ("fold_scalar_pow", "literal bound"),
                       ("fold_scalar_pow", "guard false")}
    assert "truediv = 1 / 0" in gm.code and "pow_1 = 2 ** 100000" in gm.code


def test_tensor_arithmetic_is_not_folded() -> None:
    gm, _ = _graph((torch.add, (2, 3)), (operator.add, (torch.tensor(2), 3)))
    assert fxrules.apply(gm, "algebra.fxr", only="fold_*").counts() == {}
