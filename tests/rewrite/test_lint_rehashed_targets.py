"""The commit's lint and ``call_function`` targets whose hash changed after their nodes were filed in the
``find_nodes`` table: ``Graph.lint`` looks each node up by its target as it hashes at lint time, so a node
whose target's lookup no longer reaches its bucket fails it, and the commit's lint raises the same error."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.fx

from fxrules.rewrite.lint import lint


class _Rehashable:
    """A callable target hashed by a number that can change after it is filed; equal to ``others`` too."""

    __name__ = "rehashable"

    def __init__(self, number: int, others: tuple[_Rehashable, ...] = ()) -> None:
        self.number = number
        self.others = others

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def __hash__(self) -> int:
        return self.number

    def __eq__(self, other: object) -> bool:
        return other is self or any(other is o for o in self.others)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(x)


def _with_calls(*targets: _Rehashable) -> torch.fx.GraphModule:
    """A traced module with a call of each target after its ``neg``, each target's node in its own bucket."""
    gm = torch.fx.symbolic_trace(Model())
    previous = next(n for n in gm.graph.nodes if n.name == "neg")
    for target in targets:
        with gm.graph.inserting_after(previous):
            previous = gm.graph.call_function(target, (previous,))
    return gm


def _rehashed() -> tuple[torch.fx.GraphModule, bool]:
    target = _Rehashable(1)
    gm = _with_calls(target)
    target.number = 2
    return gm, False


def _rehashed_into_an_equal_targets_bucket() -> tuple[torch.fx.GraphModule, bool]:
    """The second target now hashes as the first, which it equals: its lookup reaches the first's bucket."""
    first = _Rehashable(1)
    second = _Rehashable(2, others=(first,))
    first.others = (second,)
    gm = _with_calls(first, second)
    second.number = 1
    return gm, False


def _rehashed_and_back() -> tuple[torch.fx.GraphModule, bool]:
    target = _Rehashable(1)
    gm = _with_calls(target)
    target.number = 2
    target.number = 1
    return gm, True


CASES: dict[str, Callable[[], tuple[torch.fx.GraphModule, bool]]] = {
    "a target rehashed after it was filed": _rehashed,
    "a target rehashed as an equal target's": _rehashed_into_an_equal_targets_bucket,
    "a target rehashed and back again": _rehashed_and_back,
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_lint_raises_what_graph_lint_raises_for_rehashed_targets(
        case: Callable[[], tuple[torch.fx.GraphModule, bool]]) -> None:
    """Whether ``Graph.lint`` passes or raises (with which message), the commit's lint does the same."""
    gm, valid = case()
    if valid:
        gm.graph.lint()
        lint(gm.graph)
        return
    with pytest.raises(Exception) as expected:
        gm.graph.lint()
    with pytest.raises(type(expected.value)) as raised:
        lint(gm.graph)
    assert str(raised.value) == str(expected.value)
