"""An ``apply`` interrupted while it makes nodes leaves the graph's names as they were: the next node the graph
makes gets the name it gets in an untouched copy, wherever in making a node (naming it, taking its name) the
interrupt came."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx

import fxrules
from fxrules.rewrite import transaction
from tests.engine.test_all_or_nothing import assert_unchanged, snapshot
from tests.interrupting import in_file, interrupt_at_every_line

#: each rewrite makes a ``relu`` node, named after those the graph has
RELU_TWICE = fxrules.parse("rule relu_twice:\n    torch.relu(torch.relu(x)) => torch.relu(x)\n", "names.fxr")


def two_double_relus(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.relu(torch.relu(x)) + 1, torch.relu(torch.relu(y)) * 2


def next_relu_name(gm: torch.fx.GraphModule) -> str:
    """The name the graph gives the next ``torch.relu`` node it makes (which is then erased)."""
    probe = gm.graph.call_function(torch.relu, (next(iter(gm.graph.nodes)),))
    gm.graph.erase_node(probe)
    return probe.name


def test_an_interrupt_at_any_line_of_the_transaction_leaves_the_names_new_nodes_get() -> None:
    """A Ctrl-C at each line of the transaction's code, two rewrites making a ``relu`` each, leaves the module as
    it was, and the graph names its next ``relu`` node as an untouched copy does: no name the rewrites took is
    left taken, and the count the graph numbers ``relu`` nodes from is as it was."""
    expected = next_relu_name(torch.fx.symbolic_trace(two_double_relus))

    def expect(gm: torch.fx.GraphModule) -> Callable[[], None]:
        before = snapshot(gm)

        def check() -> None:
            assert_unchanged(before, gm)
            assert next_relu_name(gm) == expected

        return check

    assert interrupt_at_every_line(lambda: torch.fx.symbolic_trace(two_double_relus), RELU_TWICE,
                                   in_file(transaction.__file__), expect) > 20
