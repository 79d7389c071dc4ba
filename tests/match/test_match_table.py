"""The matching semantics of docs/language.md (sections 4-8) as a truth table, run through every implementation.

Each row is ``(graph source, rules, expected anchors)``: the source is a
function or module that ``symbolic_trace`` turns into a graph, the rules are
``.fxr`` text, and the expected anchors are the names of the nodes where a
single pass fires (``rule@node`` when a row has several rules).  No row has
overlapping or cascading sites, so "matches" and "fires" coincide and every
implementation must give the same answer:

* the reference -- :mod:`tests.reference_matcher`: every rule at every node;
* the engine's anchor index, then each execution of matching (the ``matching`` fixture: compiled,
  compiled with a tracer, interpreted), on the same graph;
* the anchors ``fxrules.apply`` reports, with and without ``explain=True``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn.functional as F  # noqa: N812 - the spelling the docs use
from torch import nn

import fxrules
from fxrules.lang.ir import RuleSet
from fxrules.match.matcher import Matcher, RuleIndex
from fxrules.match.skips import Skip
from tests.conftest import trace
from tests.reference_matcher import Matches, predict_pass


class Calls(nn.Module):
    """Calls each named submodule on the input, in order, and returns all results; traced with them as leaves."""

    def __init__(self, **modules: nn.Module) -> None:
        super().__init__()
        for name, module in modules.items():
            self.add_module(name, module)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(module(x) for module in self.children())


class Chain(Calls):
    """Calls the named submodules one after the other."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        for module in self.children():
            x = module(x)
        return x


class Twice(nn.Module):
    """Calls one submodule twice in a row."""

    def __init__(self) -> None:
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.act(x))


class _ChildrenAsLeaves(torch.fx.Tracer):
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return True


def to_graph(source: Callable[..., Any] | nn.Module) -> torch.fx.GraphModule:
    """``symbolic_trace``, except that every submodule stays a ``call_module`` node (even a subclass of ours)."""
    if isinstance(source, nn.Module):
        return torch.fx.GraphModule(source, _ChildrenAsLeaves().trace(source))
    return trace(source)


class MyReLU(nn.ReLU):
    """A subclass: an instance of it is an instance of nn.ReLU."""


@dataclass(frozen=True)
class Row:
    name: str
    source: Callable[..., Any] | nn.Module
    rules: str
    expected: frozenset[str]


def row(name: str, source: Callable[..., Any] | nn.Module, rules: str, *expected: str) -> Any:
    return pytest.param(Row(name, source, rules, frozenset(expected)), id=name)


SPLIT_SUM_OF_CAT = """
rule split_sum_of_cat:
    pattern:
        c = torch.cat([u, v])
        return c.sum(), c.mean()
    replace:
        s = u.sum() + v.sum()
        return s, s / (u.numel() + v.numel())
"""

NEG_AND_ADD = """
rule neg_and_add:
    pattern:
        return torch.neg(x), torch.add(x, y)
    replace:
        return torch.sigmoid(x), torch.sub(x, y)
"""

SIGMOID_SQUARED = """
rule sigmoid_squared:
    pattern:
        s = torch.sigmoid(x)
        return s * s
    replace:
        return torch.sigmoid(x) ** 2
"""

RELU_MODULE = """
rule relu_module:
    given:
        m: nn.ReLU
    pattern:
        return m(x)
    replace:
        return torch.relu(x)
"""

MODULE_TWICE = """
rule module_twice:
    given:
        m: nn.ReLU
    pattern:
        return m(m(x))
    replace:
        return m(x)
"""

NEG_EXP = """
rule neg_exp:
    pattern:
        n = torch.neg(x)
        d = torch.exp(n) * 2
        return {}
    replace:
        m = torch.neg(x)
        e = torch.exp(m)
        return {}
"""
NEG_EXP_AS_WRITTEN = NEG_EXP.format("n, d", "m, e + e")
NEG_EXP_COMPUTED_FIRST = NEG_EXP.format("d, n", "e + e, m")

INT_CAPTURE = """
rule scale_by_int:
    given:
        k: int
    pattern:
        return x * k
    replace:
        return torch.mul(x, k)
"""


def _torch_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


def _functional_relu(x: torch.Tensor) -> torch.Tensor:
    return F.relu(x)


def _escaping_interior(x: torch.Tensor) -> Any:
    n = torch.neg(x)
    return torch.neg(n), n


class WithBias(nn.Module):
    """Reads a parameter: a ``get_attr`` node."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(3))

    def forward(self, x: torch.Tensor) -> Any:
        return x + self.bias, x + 1.0


def _aten_relu(x: torch.Tensor) -> Any:
    return torch.ops.aten.relu.default(x), torch.ops.aten.sigmoid.default(x)


def _cycle(x: torch.Tensor) -> Any:
    n = torch.neg(x)
    return n, torch.add(x, torch.tanh(n))


def _shared_sigmoid(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return s * s


def _dead_user(x: torch.Tensor) -> torch.Tensor:
    n = torch.neg(x)
    torch.sigmoid(n)
    return torch.neg(n)


def _sum_and_mean(u: torch.Tensor, v: torch.Tensor) -> Any:
    c = torch.cat([u, v])
    return c.sum(), c.mean()


def _mean_and_sum(u: torch.Tensor, v: torch.Tensor) -> Any:
    c = torch.cat([u, v])
    m = c.mean()
    return c.sum(), m


def _neg_and_doubled_exp(x: torch.Tensor) -> Any:
    n = torch.neg(x)
    return n.sin(), torch.exp(n) * 2


def _sum_mean_and_exp(u: torch.Tensor, v: torch.Tensor) -> Any:
    c = torch.cat([u, v])
    return c.sum(), c.mean(), c.exp()


ROWS = [
    # exact targets, operators, methods
    row("exact target", lambda x: torch.neg(torch.neg(x)), "rule r: torch.neg(torch.neg(x)) => x", "neg_1"),
    row("exact target: other spellings do not match", lambda x: (operator.neg(-x), x.neg().neg()),
        "rule r: torch.neg(torch.neg(x)) => x"),
    row("operator", lambda x: operator.neg(-x), "rule r: -(-x) => x", "neg_1"),
    row("operator is not torch.add", lambda x, y: (x + y, torch.add(x, y)), "rule r: a + b => a * b", "add"),
    row("method is not the function", lambda x: (x.relu(), torch.relu(x)), "rule r: x.relu() => x.sigmoid()", "relu"),
    row("method arguments", lambda x: (x.transpose(0, 1), x.transpose(dim0=0, dim1=1), x.transpose(1, 0)),
        "rule r: x.transpose(0, 1) => x.t()", "transpose", "transpose_1"),
    # modules by type
    row("module by type", Calls(act=nn.ReLU(), other=nn.Tanh()), RELU_MODULE, "act"),
    row("module by type: a subclass instance", Calls(act=MyReLU()), RELU_MODULE, "act"),
    row("a module capture used twice binds one module", Twice(), MODULE_TWICE, "act_1"),
    row("a module capture used twice: two modules do not match", Chain(a=nn.ReLU(), b=nn.ReLU()), MODULE_TWICE),
    # families, each spelling
    row("family relu: torch.relu", _torch_relu, "rule r: relu(x) => torch.sigmoid(x)", "relu"),
    row("family relu: F.relu", _functional_relu, "rule r: relu(x) => torch.sigmoid(x)", "relu"),
    row("family relu: method", lambda x: x.relu(), "rule r: relu(x) => torch.sigmoid(x)", "relu"),
    row("family relu: nn.ReLU", Calls(act=nn.ReLU()), "rule r: relu(x) => torch.sigmoid(x)", "act"),
    row("family relu: F.relu inplace=True does not match", lambda x: F.relu(x, inplace=True),
        "rule r: relu(x) => torch.sigmoid(x)"),
    row("family relu: nn.ReLU(inplace=True) does not match", Calls(act=nn.ReLU(inplace=True)),
        "rule r: relu(x) => torch.sigmoid(x)"),
    row("family relu: an nn.ReLU subclass instance", Calls(act=MyReLU()), "rule r: relu(x) => torch.sigmoid(x)",
        "act"),
    row("family neg: every spelling", lambda x: (-x, torch.neg(x), x.neg()), "rule r: neg(x) => torch.sigmoid(x)",
        "neg", "neg_1", "neg_2"),
    # argument normalization, defaults, `...`
    row("normalized: positional, keyword, explicit default",
        lambda c: (torch.sum(c, -1), torch.sum(c, dim=-1), torch.sum(c, dim=-1, keepdim=False), c.sum(-1)),
        "rule r: torch.sum(x, -1) => torch.mean(x, -1)", "sum_1", "sum_2", "sum_3"),
    row("normalized: the pattern by keyword",
        lambda c: (torch.sum(c, -1), torch.sum(c, dim=-1), torch.sum(c, dim=-1, keepdim=False)),
        "rule r: torch.sum(x, dim=-1) => torch.mean(x, -1)", "sum_1", "sum_2", "sum_3"),
    row("an omitted non-default argument does not match", lambda c: torch.sum(c, -1, keepdim=True),
        "rule r: torch.sum(x, -1) => torch.mean(x, -1)"),
    row("an omitted default argument given explicitly", lambda x, y: (torch.add(x, y, alpha=1),
                                                                      torch.add(x, y, alpha=2)),
        "rule r: torch.add(a, b) => torch.sub(a, b)", "add"),
    row("... accepts any other arguments", lambda c: (torch.sum(c, -1, keepdim=True), torch.sum(c), torch.mean(c)),
        "rule r: torch.sum(x, ...) => torch.mean(x)", "sum_1", "sum_2"),
    row("aten overload, exact and by family", _aten_relu,
        "rule r: aten.relu.default(x) => torch.neg(x)\nrule s: sigmoid(x) => torch.tanh(x)",
        "r@relu_default", "s@sigmoid_default"),
    row("get_attr capture", WithBias(), "rule r:\n    given:\n        p: Attr\n    pattern:\n        return x + p\n"
                                        "    replace:\n        return torch.add(x, p)", "add"),
    row("use: a short name for a module", lambda x: (F.gelu(x), F.gelu(x, approximate="tanh"), torch.tanh(x)),
        "use torch.nn.functional as G\nrule r: G.gelu(x) => torch.sigmoid(x)", "gelu"),
    row("exact F.relu: tracing records inplace=False", _functional_relu, "rule r: F.relu(x) => torch.sigmoid(x)",
        "relu"),
    row("declared commutative", lambda x, y: torch.maximum(y, torch.sigmoid(x)),
        "commutative torch.maximum\nrule r: torch.maximum(torch.sigmoid(a), b) => torch.relu(b)", "maximum"),
    row("not declared commutative", lambda x, y: torch.maximum(y, torch.sigmoid(x)),
        "rule r: torch.maximum(torch.sigmoid(a), b) => torch.relu(b)"),
    # literals
    row("literal: a string", lambda x: (F.gelu(x, approximate="tanh"), F.gelu(x)),
        'rule r: F.gelu(x, approximate="tanh") => F.gelu(x)', "gelu"),
    row("literal: a dtype", lambda x: (x.to(torch.float16), x.to(torch.float32)),
        "rule r: x.to(torch.float16) => x.half()", "to"),
    row("getitem: an index and a slice", lambda x: (x[0], x[1], x[:, 0], x[1:]),
        "rule r: a[0] => a.sum()\nrule s: a[:, 0] => a.sum()\nrule t: a[1:] => a.sum()",
        "r@getitem", "s@getitem_2", "t@getitem_3"),
    row("literal: bool is not int", lambda x: (x + True, x + 1), "rule r: a + 1 => a", "add_1"),
    row("literal: True is True", lambda x: (x + True, x + 1), "rule r: a + True => a", "add"),
    row("literal: int is not float", lambda x: (x * 1, x * 1.0), "rule r: a * 1 => a", "mul"),
    row("literal: 0.0 is not -0.0", lambda x: (x + 0.0, x + -0.0), "rule r: a + 0.0 => a", "add"),
    row("literal: -0.0 is not 0.0", lambda x: (x + 0.0, x + -0.0), "rule r: a + -0.0 => a", "add_1"),
    row("literal: nan equals nan", lambda x: (x + float("nan"), x + 1.0), "rule r: a + nan => a * nan", "add"),
    row("typed capture: int, not bool or float", lambda x: (x * 2, x * 2.0, x * True), INT_CAPTURE, "mul"),
    # lists and captures
    row("list: element by element, a tuple too", lambda x, y: (torch.cat([x, y]), torch.cat([x, y, x]),
                                                               torch.cat((x, y))),
        "rule r: torch.cat([a, b]) => a + b", "cat", "cat_2"),
    row("list: non-linear capture", lambda x, y: (torch.cat([x, x]), torch.cat([x, y])),
        "rule r: torch.cat([a, a]) => a + a", "cat"),
    row("non-linear: a * a does not match x * y", lambda x, y: (x * x, x * y), "rule r: a * a => a ** 2", "mul"),
    row("wildcard binds nothing", lambda x, y: (torch.cat([x, x]), torch.cat([x, y]), torch.cat([x])),
        "rule r: torch.cat([a, _]) => a", "cat", "cat_1"),
    # alternatives, commutativity
    row("alternatives", lambda x: (torch.sigmoid(x), torch.tanh(x), torch.exp(x)),
        "rule r: torch.sigmoid(a) | torch.tanh(a) => torch.relu(a)", "sigmoid", "tanh"),
    row("alternatives inside an argument", lambda x: (torch.neg(torch.sigmoid(x)), torch.neg(torch.exp(x))),
        "rule r: torch.neg(torch.sigmoid(a) | torch.tanh(a)) => a", "neg"),
    row("commutative: both orders", lambda x: (x * 1, 1 * x, torch.mul(x, 1), torch.mul(1, x)),
        "rule r: a * 1 => a", "mul", "mul_1"),
    row("commutative family: every spelling, both orders", lambda x: (x * 1, 1 * x, torch.mul(x, 1),
                                                                     torch.mul(1, x)),
        "rule r: mul(a, 1) => a", "mul", "mul_1", "mul_2", "mul_3"),
    row("not commutative: sub", lambda x: (x - 1, 1 - x), "rule r: a - 1 => a", "sub"),
    # users outside the match, DAGs, several outputs
    row("escaping interior node", _escaping_interior,
        "rule r: torch.neg(torch.neg(x)) => x"),
    row("a dead user counts", _dead_user, "rule r: torch.neg(torch.neg(x)) => x"),
    row("the output may have users", lambda x: torch.neg(torch.neg(x)).sigmoid(),
        "rule r: torch.neg(torch.neg(x)) => x", "neg_1"),
    row("DAG: a shared interior node", _shared_sigmoid, SIGMOID_SQUARED, "mul"),
    row("DAG: two equal nodes are not one", lambda x: torch.sigmoid(x) * torch.sigmoid(x), SIGMOID_SQUARED),
    row("two outputs", _sum_and_mean, SPLIT_SUM_OF_CAT, "sum_1"),
    row("two outputs, in the other order", _mean_and_sum, SPLIT_SUM_OF_CAT, "sum_1"),
    row("two outputs: one computed from the other, named first", _neg_and_doubled_exp, NEG_EXP_AS_WRITTEN, "mul"),
    row("two outputs: one computed from the other, named last", _neg_and_doubled_exp, NEG_EXP_COMPUTED_FIRST, "mul"),
    row("two outputs, an escaping interior node", _sum_mean_and_exp, SPLIT_SUM_OF_CAT),
    row("two outputs, a capture computed from the match (a cycle)", _cycle, NEG_AND_ADD),
    row("two outputs, no cycle", lambda x, w: (torch.neg(x), torch.add(x, w)), NEG_AND_ADD, "neg"),
    row("file order at one anchor", lambda x: torch.neg(torch.neg(x)).sigmoid(),
        "rule first: neg(neg(x)) => x\nrule second: torch.neg(torch.neg(x)) => x", "first@neg_1"),
]


# ---------------------------------------------------------------- the implementations


def by_reference(gm: torch.fx.GraphModule, rules: RuleSet) -> set[tuple[str, str]]:
    return predict_pass(gm, rules)


def by_index(gm: torch.fx.GraphModule, rules: RuleSet, matcher: Matcher) -> set[tuple[str, str]]:
    """The rules the engine's anchor index files under each node, matched there by ``matcher``."""
    index = RuleIndex(gm, rules)
    matches: Matches = {}
    for node in gm.graph.nodes:
        for rule in index.rules_at(node):
            try:
                match = matcher.match(rule, node)
            except Skip:
                continue
            if match is not None:
                matches[rule.name, node.name] = frozenset(n.name for n in match.nodes)
    return predict_pass(gm, rules, matches)


def by_apply(gm: torch.fx.GraphModule, rules: RuleSet, explain: bool) -> set[tuple[str, str]]:
    """What fired, and the matches the rewriter refused only because the graph would return its input (an
    identity rewrite of the returned value): they match, which is what the table is about."""
    report = fxrules.apply(gm, rules, explain=explain)
    gm.graph.lint()
    return {(rule.name, anchor) for rule in report.rules for anchor in rule.anchors} | {
        (rule.name, skip.node) for rule in report.rules for skip in rule.skipped if skip.reason == "alias"}


def check_row(case: Row, implementation: Callable[[torch.fx.GraphModule, RuleSet], set[tuple[str, str]]]) -> None:
    rules = fxrules.parse(case.rules, filename=f"<{case.name}>")
    gm = to_graph(case.source)
    code = gm.code
    found = implementation(gm, rules)
    shown = {anchor if len(rules) == 1 else f"{rule}@{anchor}" for rule, anchor in found}
    assert shown == case.expected, f"rules:\n{case.rules}\ngraph:{code}"


@pytest.mark.parametrize("case", ROWS)
def test_the_reference_predicts_each_row(case: Row) -> None:
    check_row(case, by_reference)


@pytest.mark.parametrize("case", ROWS)
def test_each_execution_matches_each_row_at_the_indexed_nodes(case: Row,
                                                              matching: Callable[[torch.nn.Module], Matcher]) -> None:
    check_row(case, lambda gm, rules: by_index(gm, rules, matching(gm)))


@pytest.mark.parametrize("explain", [False, True], ids=["apply", "explain"])
@pytest.mark.parametrize("case", ROWS)
def test_apply_fires_each_row(case: Row, explain: bool) -> None:
    check_row(case, lambda gm, rules: by_apply(gm, rules, explain))


def test_table_size() -> None:
    assert len(ROWS) >= 25
