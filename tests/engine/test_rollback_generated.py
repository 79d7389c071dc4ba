"""A failed or interrupted ``apply`` leaves generated graphs exactly as they were, and a later ``apply`` gives what
an ``apply`` of an untouched copy gives.

Each case is a graph built from a seed: chains the rules rewrite (double negations whose users use the operand too,
as an argument, in a list, as a keyword, twice), two-output matches, literal replacements, in-place writes
(``add_``, ``inplace=True``, ``out=``), views, some nodes of a ``Node`` subclass, and some modules with create and
erase hooks.  ``apply`` fails there in four ways: a helper raising, a rule that keeps firing until ``max_passes``,
a lint that rejects the rewritten graph, and a ``KeyboardInterrupt`` at a chosen line of fxrules' own code.
"Exactly" is every node in order with its name, target, arguments and keyword arguments (nodes by name, each
container by its type), its users in order, its metadata, the ``find_nodes`` buckets in order, and the code.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx

import fxrules
from fxrules.rewrite import lint
from tests.interrupting import Interrupter, apply_interrupted, under

RULE_TEXT = """
rule neg_twice:
    torch.neg(torch.neg(x)) => x

rule relu_twice:
    torch.relu(torch.relu(x)) => torch.relu(x)

rule add_zero:
    torch.add(x, 0) => x

rule cat_one:
    torch.cat([x], dim=0) => x

rule tanh_as_negations:
    torch.tanh(x) => torch.neg(torch.neg(x))

rule erfc_half:
    torch.erfc(x) => 0.5

rule sin_cos:
    pattern:
        return torch.sin(x), torch.cos(x)
    replace:
        return x, x

rule abs_sigmoid:
    pattern:
        a = torch.neg(x)
        return torch.abs(a), torch.sigmoid(a)
    replace:
        return a, torch.relu(x)
"""
RULES = fxrules.parse(RULE_TEXT, "generated.fxr")
#: keeps firing on the ``sin(cos(.))`` the failing cases end with: ``apply`` stops at ``max_passes`` with an error
with pytest.warns(fxrules.FxrLoopWarning, match="rule grows: its pattern matches its own replacement"):
    GROWING = fxrules.parse(RULE_TEXT + """
rule grows:
    torch.sin(torch.cos(x)) => torch.sin(torch.cos(torch.neg(torch.neg(x))))
""", "generated.fxr")
#: fails at the ``erf`` the failing cases end with, after the rewrites before it
RAISING = fxrules.parse(RULE_TEXT + """
rule boom:
    torch.erf(x) => torch.add(x, @boom())
""", "generated.fxr")

UNARY = (torch.neg, torch.relu, torch.sin, torch.cos, torch.abs, torch.tanh, torch.sigmoid, torch.floor,
         torch.ceil, torch.erfc)


class SubclassedNode(torch.fx.Node):
    """A ``Node`` subclass: FX's own steps must be taken with it, no fast path of fxrules."""


def _boom() -> Any:
    raise RuntimeError("boom")


def _users_of_a_double_negation(graph: torch.fx.Graph, rng: random.Random, a: torch.fx.Node,
                                 other: torch.fx.Node) -> list[torch.fx.Node]:
    """``neg(neg(a))`` and a user of it that uses ``a`` too, or uses it twice."""
    negated = graph.call_function(torch.neg, (graph.call_function(torch.neg, (a,)),))
    form = rng.randrange(5)
    if form == 0:
        user = graph.call_function(torch.add, (negated, a))
    elif form == 1:
        user = graph.call_function(torch.cat, ([a, negated, a],), {"dim": 0})
    elif form == 2:
        user = graph.call_function(torch.add, (other,), {"other": negated, "alpha": a})
    elif form == 3:
        user = graph.call_function(torch.stack, ((negated, a),))
    else:
        user = graph.call_function(torch.add, (negated, negated))
    return [negated, user]


def _node(graph: torch.fx.Graph, rng: random.Random, pick: Callable[[], torch.fx.Node]) -> list[torch.fx.Node]:
    kind = rng.random()
    if kind < 0.25:
        return _users_of_a_double_negation(graph, rng, pick(), pick())
    if kind < 0.6:
        return [graph.call_function(rng.choice(UNARY), (pick(),))]
    if kind < 0.68:
        return [graph.call_function(torch.add, (pick(), rng.choice([0, pick()])))]
    if kind < 0.76:
        return [graph.call_function(torch.cat, ([pick() for _ in range(rng.randint(1, 3))],), {"dim": 0})]
    if kind < 0.82:
        return [graph.call_method("add_", (pick(), 1))]
    if kind < 0.88:
        return [graph.call_function(torch.nn.functional.relu, (pick(),), {"inplace": True})]
    if kind < 0.94:
        return [graph.call_method("view", (pick(), -1))]
    return [graph.call_function(torch.add, (pick(), pick()), {"out": pick()})]


def generated(seed: int, ending: Callable[..., Any] | None = None) -> torch.fx.GraphModule:
    """The graph module of ``seed``; ``ending`` (``torch.erf``, or ``sin(cos(.))`` for ``torch.sin``) is called
    on a node last."""
    rng = random.Random(seed)
    graph = torch.fx.Graph()
    values = [graph.placeholder("x"), graph.placeholder("y")]

    def pick() -> torch.fx.Node:
        return rng.choice(values[-5:] if rng.random() < 0.7 else values)

    for _ in range(rng.randint(3, 14)):
        values += _node(graph, rng, pick)
    if ending is torch.sin:
        values.append(graph.call_function(torch.sin, (graph.call_function(torch.cos, (pick(),)),)))
    elif ending is not None:
        values.append(graph.call_function(ending, (pick(),)))
    returned = [values[-1], *[value for value in values[2:-1] if rng.random() < 0.15]]
    graph.output(tuple(returned))
    for node in graph.nodes:
        node.meta["seed"] = (seed, node.name)
        if node.op == "call_function" and rng.random() < 0.05:
            node.__class__ = SubclassedNode
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    if rng.random() < 0.15:
        gm._register_create_node_hook(lambda node: None)
    if rng.random() < 0.15:
        gm._register_erase_node_hook(lambda node: None)
    return gm


def _typed(value: Any) -> Any:
    """``value`` with each node as its name and each container with its type."""
    if isinstance(value, torch.fx.Node):
        return ("node", value.name)
    if isinstance(value, (tuple, list)):
        return type(value), [_typed(each) for each in value]
    if isinstance(value, dict):
        return type(value), [(key, _typed(each)) for key, each in value.items()]
    return type(value), value


def state(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """All the rollback must restore of ``gm``, by names and values: a state of another module compares equal
    when the two are alike."""
    graph = gm.graph
    nodes = [(node.name, node.op, node.target, type(node), _typed(node.args), _typed(node.kwargs),
              [user.name for user in node.users], [used.name for used in node.all_input_nodes], node.meta)
             for node in graph.nodes]
    keys = dict.fromkeys((node.op, node.target if node.op == "call_function" else None) for node in graph.nodes)
    buckets = {key: [node.name for node in graph.find_nodes(op=key[0], target=key[1], sort=False)] for key in keys}
    return {"nodes": nodes, "buckets": buckets, "code": gm.code, "modules": list(gm._modules)}


def _rejecting_lint(real: Callable[[torch.fx.Graph], None]) -> Callable[[torch.fx.Graph], None]:
    def rejecting(graph: torch.fx.Graph) -> None:
        real(graph)
        raise RuntimeError("the lint rejects the rewritten graph")
    return rejecting


def assert_restored_then_rewritable(seed: int, ending: Callable[..., Any] | None,
                                    fail: Callable[[torch.fx.GraphModule], None]) -> None:
    """``fail(gm)`` leaves the module of ``seed`` as it was, and ``apply`` then gives what it gives untouched."""
    gm = generated(seed, ending)
    before = state(gm)
    fail(gm)
    assert state(gm) == before, seed
    gm.graph.lint()
    fresh = generated(seed, ending)
    expected = fxrules.apply(fresh, RULES).counts()
    assert fxrules.apply(gm, RULES).counts() == expected, seed
    assert state(gm) == state(fresh), seed


SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_failed_apply_leaves_the_generated_graph_as_it_was(seed: int) -> None:
    """A helper raising, a rule firing past ``max_passes`` and a rejecting lint: each leaves the graph as it was
    (its failure propagating as an fxrules error), and a later ``apply`` rewrites it as it rewrites a copy."""
    def raising(gm: torch.fx.GraphModule) -> None:
        with pytest.raises(fxrules.FxrError, match="RuntimeError: boom"):
            fxrules.apply(gm, RAISING, helpers={"boom": _boom})

    def growing(gm: torch.fx.GraphModule) -> None:
        with pytest.raises(fxrules.FxrError, match="max_passes=3"):
            fxrules.apply(gm, GROWING, max_passes=3)

    def linted(gm: torch.fx.GraphModule) -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(lint, "lint", _rejecting_lint(lint.lint))
            report_or_error: list[Any] = []
            try:
                report_or_error.append(fxrules.apply(gm, RULES))
            except fxrules.FxrError as error:
                report_or_error.append(error)
        if isinstance(report_or_error[0], fxrules.Report):  # nothing fired: no lint, nothing to restore
            assert report_or_error[0].total_fired == 0

    assert_restored_then_rewritable(seed, torch.erf, raising)
    assert_restored_then_rewritable(seed, torch.sin, growing)
    assert_restored_then_rewritable(seed, None, linted)


@pytest.mark.parametrize("seed", SEEDS)
def test_an_interrupt_at_a_line_of_apply_leaves_the_generated_graph_as_it_was(seed: int) -> None:
    """A Ctrl-C at lines spread over the whole ``apply`` (matching, rewriting, committing) propagates and leaves
    the graph as it was, or, landing once the commit is done, as an uninterrupted ``apply`` leaves it; either
    way a later ``apply`` gives what it gives an untouched copy."""
    # the rules' caches filled, as they are for the counted run below
    apply_interrupted(generated(seed), RULES, None, IN_FXRULES)
    lines = apply_interrupted(generated(seed), RULES, None, IN_FXRULES)
    rewritten = generated(seed)
    fxrules.apply(rewritten, RULES)
    for index in sorted(random.Random(seed).sample(range(lines), min(lines, 6))):
        gm = generated(seed)
        before = state(gm)
        with pytest.raises(KeyboardInterrupt):
            apply_interrupted(gm, RULES, index, IN_FXRULES)
        assert state(gm) in (before, state(rewritten)), (seed, index)
        gm.graph.lint()
        fxrules.apply(gm, RULES)
        assert state(gm) == state(rewritten), (seed, index)


LIST_RULES = fxrules.parse("""
rule as_list:
    torch.log1p(x) => [x, x]

rule cat_one:
    torch.cat([x], dim=0) => x
""", "as_list.fxr")


def _list_then_node(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.log1p(y), torch.cat([x], dim=0)], dim=0)


def test_a_failed_apply_gives_the_nodes_of_a_list_replacement_their_users_back() -> None:
    """``cat([log1p(y), cat([x])])``: ``as_list`` puts ``[y, y]`` in the outer ``cat`` (``y`` gains it as a
    user), then ``cat_one`` redirects it again; after a failed apply ``y`` is used by ``log1p`` alone."""
    gm = torch.fx.symbolic_trace(_list_then_node)
    before = state(gm)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lint, "lint", _rejecting_lint(lint.lint))
        with pytest.raises(fxrules.FxrError, match="the lint rejects"):
            fxrules.apply(gm, LIST_RULES)
    assert state(gm) == before


#: a replacement of one call: the rewriter sets the insertion point and makes the node itself
ONE_CALL = fxrules.parse("rule relu_twice:\n    torch.relu(torch.relu(x)) => torch.relu(x)\n", "one_call.fxr")


def _relu_twice(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.relu(x)) + 1


#: the lines of fxrules' own code, and of its rewriting code alone (where the rewriter sets the insertion point)
IN_FXRULES = under(os.path.dirname(fxrules.__file__))
IN_REWRITING = under(os.path.join(os.path.dirname(fxrules.__file__), "rewrite"))


def _appended_last(gm: torch.fx.GraphModule) -> bool:
    """Whether a node the graph makes outside any ``inserting_*`` block goes last, as FX puts it."""
    probe = gm.graph.call_function(torch.digamma, (next(iter(gm.graph.nodes)),))
    last = next(iter(reversed(gm.graph.nodes)))
    gm.graph.erase_node(probe)
    return last is probe


def test_an_interrupt_at_any_line_of_a_rewrite_leaves_the_insertion_point_as_it_was() -> None:
    """A Ctrl-C at each line run in fxrules' rewriting code leaves the graph as it was, nodes made later
    included: they go last, as before ``apply``."""
    interrupter = Interrupter(None, IN_REWRITING)
    sys.settrace(interrupter.call)
    try:
        fxrules.apply(torch.fx.symbolic_trace(_relu_twice), ONE_CALL)
    finally:
        sys.settrace(None)
    assert interrupter.count > 50
    leaked = []
    for index in range(interrupter.count):
        gm = torch.fx.symbolic_trace(_relu_twice)
        before = state(gm)
        interrupter = Interrupter(index, IN_REWRITING)
        sys.settrace(interrupter.call)
        try:
            fxrules.apply(gm, ONE_CALL)
        except KeyboardInterrupt:
            assert state(gm) == before, index
        finally:
            sys.settrace(None)
        if not _appended_last(gm):
            leaked.append(index)
    assert leaked == []
