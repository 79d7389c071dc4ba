"""The commit deletes what nothing refers to any more, and only that: a submodule no longer called is deleted
unless a parameter of it is still read or a child of it still called; a helper buffer a later rewrite left
unread is not kept, one still read is."""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.fx

import fxrules


class _LinearAndItsWeight(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) + self.lin.weight.sum()


DROP_LINEAR = """
rule drop_linear:
    given:
        l: nn.Linear
    pattern:
        return torch.relu(l(x))
    replace:
        return torch.relu(x)
"""


def test_a_submodule_whose_parameter_is_still_read_is_kept() -> None:
    """The rewrite removes the only call of ``lin``, but ``get_attr lin.weight`` still reads it: deleting
    ``lin`` would leave a graph that fails when run, so a submodule no longer *called* is kept while it is
    still read."""
    gm = torch.fx.symbolic_trace(_LinearAndItsWeight())
    x = torch.randn(2, 3)
    report = fxrules.apply(gm, fxrules.parse(DROP_LINEAR))
    assert report.counts() == {"drop_linear": 1}
    assert isinstance(gm.get_submodule("lin"), torch.nn.Linear)
    torch.testing.assert_close(gm(x), torch.relu(x) + gm.lin.weight.sum())


def test_a_submodule_whose_child_is_still_called_is_kept() -> None:
    """The rewrite removes the call of ``blk``; ``blk.act`` is still called, so ``blk`` stays (deleting
    ``blk`` would delete ``blk.act`` with it)."""
    root = torch.nn.Module()
    root.blk = torch.nn.Sequential(OrderedDict(act=torch.nn.ReLU()))  # torch's own: a call that writes nothing
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    kept = graph.call_module("blk.act", (x,))
    dropped = graph.call_function(torch.neg, (graph.call_function(torch.neg, (graph.call_module("blk", (x,)),)),))
    graph.output(graph.call_function(torch.add, (kept, dropped)))
    gm = torch.fx.GraphModule(root, graph)
    rules = """
rule drop_module:
    given:
        m: nn.Module
    pattern:
        return torch.neg(torch.neg(m(x)))
    replace:
        return x
"""
    report = fxrules.apply(gm, fxrules.parse(rules))
    assert report.counts() == {"drop_module": 1}
    assert isinstance(gm.get_submodule("blk.act"), torch.nn.ReLU)
    t = torch.randn(4)
    torch.testing.assert_close(gm(t), torch.relu(t) + t)


def test_a_submodule_nothing_refers_to_any_more_is_still_deleted() -> None:
    class OnlyCalled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.lin(x))

    gm = torch.fx.symbolic_trace(OnlyCalled())
    assert fxrules.apply(gm, fxrules.parse(DROP_LINEAR)).counts() == {"drop_linear": 1}
    assert not hasattr(gm, "lin")


def test_a_helper_buffer_that_a_later_rewrite_left_unread_is_not_kept() -> None:
    """``scale`` adds the buffer ``two`` (pass 1); ``drop`` then removes its only reader (pass 2).  The
    commit deletes the buffer: it does not stay in the module's state_dict when nothing reads it."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(x)) + 1

    rules = """
rule scale:
    torch.neg(torch.neg(x)) => x * @two(x)

rule drop:
    (x * p) + 1 => x + 1
"""
    gm = torch.fx.symbolic_trace(f)
    report = fxrules.apply(gm, fxrules.parse(rules), helpers={"two": lambda x: torch.tensor(2.0)})
    assert report.counts() == {"scale": 1, "drop": 1}
    assert "two" not in gm.state_dict()
    t = torch.randn(3)
    torch.testing.assert_close(gm(t), t + 1)


def test_a_helper_buffer_still_read_is_kept() -> None:
    gm = torch.fx.symbolic_trace(lambda x: torch.neg(torch.neg(x)))
    rules = "rule scale:\n    torch.neg(torch.neg(x)) => x * @two(x)\n"
    assert fxrules.apply(gm, fxrules.parse(rules), helpers={"two": lambda x: torch.tensor(2.0)}).counts() == {
        "scale": 1}
    assert "two" in gm.state_dict()
    t = torch.randn(3)
    torch.testing.assert_close(gm(t), t * 2)


class _DeadBeforeAndAfter(torch.nn.Module):
    """Dead code from the start (a pure product, an assertion that writes nothing but must run) and code a
    rewrite leaves dead (a random call the rule names, a pair of negations)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.sin() * 2  # unused from the start: the commit erases it, and the sin only it reads
        torch._assert(x.numel() > 0, "empty")
        return torch.neg(torch.neg(torch.nn.functional.dropout(x, 0.5, True))) + 1


DROP_DROPOUT_AND_NEGATIONS = """
rule drop:
    F.dropout(x, 0.5, True) => x

rule neg_twice:
    torch.neg(torch.neg(x)) => x
"""


def test_the_commit_erases_the_retired_nodes_and_the_pure_code_dead_from_the_start() -> None:
    """The commit erases, last to first, every unused node a rewrite retired (the random dropout too: the rule
    names it) and every unused pure node, also one that was unused before ``apply`` and the nodes only it
    used; an unused call with an effect (``torch._assert``) stays, and so do the nodes it reads.  With an
    erase hook or without one, the same nodes go."""
    codes: list[str] = []
    heard: list[str] = []  # the hooked module's, the second
    for hooked in (False, True):
        gm = torch.fx.symbolic_trace(_DeadBeforeAndAfter())
        if hooked:
            gm._register_erase_node_hook(lambda node: heard.append(node.name))
        report = fxrules.apply(gm, fxrules.parse(DROP_DROPOUT_AND_NEGATIONS))
        assert report.counts() == {"drop": 1, "neg_twice": 1}
        assert [n.name for n in gm.graph.nodes] == ["x", "numel", "gt", "_assert", "add", "output"]
        codes.append(gm.code)
    assert heard == ["neg_1", "neg", "dropout", "mul", "sin"]
    assert codes[0] == codes[1]
