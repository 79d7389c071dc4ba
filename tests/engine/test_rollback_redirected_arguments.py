"""An ``apply`` that fails gives every redirected node its arguments back exactly, whichever way the undo log
kept them: a redirection whose users did not use the replacement yet is undone by putting the replaced node
back where the replacement stands; one where a user already used the replacement, is of a ``Node`` subclass,
or may be changed by the module's replace hooks, is undone from the arguments as they were."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.fx

import fxrules
from fxrules.diagnostics import FxrConvergenceError
from fxrules.rewrite import transaction
from tests.engine.test_all_or_nothing import assert_unchanged, snapshot
from tests.interrupting import in_file, interrupt_at_every_line

#: ``neg_twice`` redirects the users of a double negation to ``x``; ``grows`` keeps firing, so apply fails.
RULES = fxrules.parse("""
rule neg_twice:
    torch.neg(torch.neg(x)) => x

rule grows:
    torch.sin(torch.cos(x)) => torch.sin(torch.cos(torch.neg(torch.neg(x))))
""", "redirected.fxr")

NEG_TWICE = fxrules.parse("rule neg_twice:\n    torch.neg(torch.neg(x)) => x\n", "redirected.fxr")


def uses_the_replacement_already(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Users of ``neg(neg(x))`` that use ``x`` too (as written, in a list, as a keyword), and one that does not."""
    negated = torch.neg(torch.neg(x))
    return (torch.add(negated, x), torch.cat([x, negated, x]), torch.add(y, other=negated, alpha=x),
            torch.mul(negated, y), torch.sin(torch.cos(y)))


def _arguments(gm: torch.fx.GraphModule) -> dict[str, tuple[object, object]]:
    """Each node's arguments, nodes by name, containers as they are typed."""
    def named(value: object) -> object:
        return torch.fx.node.map_arg(value, lambda node: node.name)

    return {node.name: (named(node.args), named(dict(node.kwargs))) for node in gm.graph.nodes}


def test_a_failed_apply_gives_users_that_already_used_the_replacement_their_arguments_back() -> None:
    """``add(neg_1, x)`` is ``add(neg_1, x)`` again after the failed apply, not ``add(neg_1, neg_1)`` (what
    putting ``neg_1`` back wherever ``x`` stands would give), and likewise in a list and a keyword."""
    gm = torch.fx.symbolic_trace(uses_the_replacement_already)
    before, arguments = snapshot(gm), _arguments(gm)
    with pytest.raises(FxrConvergenceError):
        fxrules.apply(gm, RULES, max_passes=3)
    assert _arguments(gm) == arguments
    assert arguments["add"] == (("neg_1", "x"), {})
    assert arguments["cat"] == ((["x", "neg_1", "x"],), {})
    assert_unchanged(before, gm)


def redirected_twice(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``add`` uses two double negations: redirected once (to ``x``), then again (to ``y``)."""
    return torch.add(torch.neg(torch.neg(x)), torch.neg(torch.neg(y))), torch.sin(torch.cos(x))


def test_a_failed_apply_undoes_two_redirections_of_one_user_in_turn() -> None:
    """A node whose two inputs are replaced by two rewrites gets both back, each where it stood."""
    gm = torch.fx.symbolic_trace(redirected_twice)
    before, arguments = snapshot(gm), _arguments(gm)
    with pytest.raises(FxrConvergenceError):
        fxrules.apply(gm, RULES, max_passes=3)
    assert _arguments(gm) == arguments
    assert_unchanged(before, gm)


def test_a_failed_apply_undoes_what_a_replace_hook_did_to_a_user() -> None:
    """A replace hook that gives ``add`` the replacement ``x`` as an input before its redirection: the apply
    that fails leaves ``add(neg_1, y)`` as it was (not ``add(neg_1, neg_1)``), its inputs' users in order."""
    def program(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.add(torch.neg(torch.neg(x)), y), torch.mul(y, 2.0), torch.sin(torch.cos(x))

    gm = torch.fx.symbolic_trace(program)
    x = next(iter(gm.graph.find_nodes(op="placeholder", target="x")))

    def hook(old: torch.fx.Node, new: str, user: torch.fx.Node) -> None:
        if user.name == "add":
            user.args = (user.args[0], x)

    gm._register_replace_node_hook(hook)
    before, arguments = snapshot(gm), _arguments(gm)
    with pytest.raises(FxrConvergenceError):
        fxrules.apply(gm, RULES, max_passes=3)
    assert _arguments(gm) == arguments == {**arguments, "add": (("neg_1", "y"), {})}
    assert_unchanged(before, gm)


class _AppendsTheReplacement(torch.fx.Node):
    """A pass's node whose ``_replace_input_with`` also gives it the replacement as one more argument."""

    def _replace_input_with(self, old: torch.fx.Node, new: torch.fx.Node) -> None:
        super()._replace_input_with(old, new)
        self.args = (*self.args, new)


def test_a_failed_apply_gives_a_redirected_node_of_a_subclass_its_arguments_back() -> None:
    """A user of a ``Node`` subclass whose redirection does more than FX's gets back exactly the arguments it
    had (not those undoing its redirection the same way would leave), its inputs' users in order."""
    def program(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.add(torch.neg(torch.neg(x)), y), torch.mul(y, 2.0), torch.sin(torch.cos(x))

    gm = torch.fx.symbolic_trace(program)
    next(node for node in gm.graph.nodes if node.name == "add").__class__ = _AppendsTheReplacement
    before, arguments = snapshot(gm), _arguments(gm)
    with pytest.raises(FxrConvergenceError):
        fxrules.apply(gm, RULES, max_passes=3)
    assert _arguments(gm) == arguments == {**arguments, "add": (("neg_1", "y"), {})}
    assert_unchanged(before, gm)


def both_ways(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A redirection undone by putting ``neg_1`` back (``mul``), one undone from the arguments kept (``add``)."""
    return torch.add(torch.neg(torch.neg(x)), x), torch.mul(torch.neg(torch.neg(y)), z), torch.sub(z, y)


def test_an_interrupt_at_any_line_of_the_transaction_gives_redirected_users_their_arguments_back() -> None:
    """An interrupt anywhere in the transaction's code, between any two redirections of either kind or during
    the commit, propagates and leaves every node's arguments and users as they were."""
    def expect(gm: torch.fx.GraphModule) -> Callable[[], None]:
        before, arguments = snapshot(gm), _arguments(gm)

        def check() -> None:
            assert _arguments(gm) == arguments
            assert_unchanged(before, gm)

        return check

    assert interrupt_at_every_line(lambda: torch.fx.symbolic_trace(both_ways), NEG_TWICE,
                                   in_file(transaction.__file__), expect) > 20
