"""An interrupt at any line of the commit leaves the module as it was: a ``KeyboardInterrupt`` raised as
each line of the undo log's own code runs after the lint (the erasure of each dead node, step by step,
the keeping of the generated code, the deletion of what is left unused), with the module's erase-node
hooks or without (FX's own ``erase_node`` then erases, and its lines are interrupted too)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
import torch.fx

import fxrules
from fxrules.rewrite import lint, transaction
from tests.engine.test_all_or_nothing import assert_unchanged, snapshot
from tests.interrupting import Interrupter

RULES = fxrules.parse("""
rule neg_twice:
    torch.neg(torch.neg(x)) => x

rule relu_twice:
    torch.relu(torch.relu(x)) => torch.relu(x)

rule add_zero:
    torch.add(x, 0, alpha=a) => x

rule cat_one:
    torch.cat([x], dim=0) => x

rule drop_linear:
    given:
        l: nn.Linear
    pattern:
        return torch.sigmoid(l(x))
    replace:
        return torch.sigmoid(x)
""")


class Model(torch.nn.Module):
    """Dead nodes with a keyword argument, a list and a literal among their arguments, and a submodule left
    uncalled."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.neg(torch.neg(torch.cat([x], dim=0)))
        b = torch.relu(torch.relu(torch.add(a, 0, alpha=3)))
        return torch.sigmoid(self.lin(b)) + a


def _model(hooked: bool) -> tuple[torch.fx.GraphModule, list[str]]:
    gm = torch.fx.symbolic_trace(Model())
    heard: list[str] = []
    if hooked:
        gm._register_erase_node_hook(lambda node: heard.append(node.name))
    return gm, heard


_TRACED = (transaction.__file__, torch.fx.Graph.erase_node.__code__)


def run_commit_interrupted(gm: torch.fx.GraphModule, rules: fxrules.RuleSet, index: int | None) -> int:
    """``apply`` with every line the undo log's code (and FX's ``erase_node``) runs after the lint counted,
    raising KeyboardInterrupt at line ``index`` (None: not at all); how many lines were counted."""
    interrupter = Interrupter(index, lambda code: code.co_filename == _TRACED[0] or code is _TRACED[1])
    real_lint = lint.lint

    def lint_then_trace(graph: torch.fx.Graph) -> None:
        real_lint(graph)
        sys.settrace(interrupter.call)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lint, "lint", lint_then_trace)
        try:
            fxrules.apply(gm, rules)
        finally:
            sys.settrace(None)
    return interrupter.count


@pytest.mark.parametrize("hooked", [False, True], ids=["without erase hooks", "with an erase hook"])
def test_an_interrupt_at_any_line_of_the_commit_leaves_the_module_as_it_was(hooked: bool) -> None:
    """Each interrupt propagates and the module is as it was (nodes, their arguments, users in order, the
    find_nodes table, names, code, submodules); a later apply gives what an uninterrupted one gives."""
    reference, _ = _model(hooked)
    lines = run_commit_interrupted(reference, RULES, None)
    assert lines > 100  # every dead node's erasure, line by line
    x = torch.randn(2, 3)
    for index in range(lines):
        gm, _ = _model(hooked)
        before = snapshot(gm)
        with pytest.raises(KeyboardInterrupt):
            run_commit_interrupted(gm, RULES, index)
        assert_unchanged(before, gm)
        fxrules.apply(gm, RULES)
        assert gm.code == reference.code, index
        torch.testing.assert_close(gm(x), reference(x))  # the linear layer the rule drops is all they differ by


def _erased_state(gm: torch.fx.GraphModule, nodes: list[torch.fx.Node]) -> dict[str, Any]:
    """What erasing leaves, by name: the nodes gone and their arguments (None where a node was), every node's
    users, the node count, and the find_nodes table."""
    graph, listed = gm.graph, set(gm.graph.nodes)
    keys = {(n.op, n.target if n.op == "call_function" else None) for n in nodes}
    return {"erased": [(n.name, n.args, dict(n.kwargs)) for n in nodes if n not in listed],
            "users": {n.name: [user.name for user in n.users] for n in nodes},
            "len": len(graph.nodes),
            "find_nodes": {key: [n.name for n in graph.find_nodes(op=key[0], target=key[1])] for key in keys}}


def test_the_commit_erases_as_fx_does_and_an_erase_hook_hears_each_dead_node_last_to_first() -> None:
    """Without erase hooks the commit erases dead nodes as FX's ``erase_node`` does with them (the nodes in
    their arguments replaced by None and losing them as a user, the find_nodes table, the node count, each
    marked erased); the module's erase-node hooks hear every node the commit erases, last to first."""
    hooked, heard = _model(True)
    plain, _ = _model(False)
    hooked_nodes, plain_nodes = list(hooked.graph.nodes), list(plain.graph.nodes)
    fxrules.apply(hooked, RULES)
    fxrules.apply(plain, RULES)
    assert hooked.code == plain.code
    assert heard == ["sigmoid", "lin", "relu_1", "relu", "add", "neg_1", "neg", "cat"]
    assert _erased_state(plain, plain_nodes) == _erased_state(hooked, hooked_nodes)
    assert _erased_state(plain, plain_nodes)["erased"][:4] == [
        ("cat", ([None],), {"dim": 0}), ("neg", (None,), {}), ("neg_1", (None,), {}), ("add", (None, 0), {"alpha": 3})]
    listed = set(plain.graph.nodes)
    for node in plain_nodes:
        if node not in listed:  # marked erased, as FX marks what it erases
            with pytest.warns(UserWarning, match="already erased"):
                plain.graph.erase_node(node)
