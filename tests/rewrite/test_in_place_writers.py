"""Finding the graph's in-place writers among thousands of calls that cannot write: a write made by a method that
changes its receiver, by ``True`` at an ``inplace`` position, or by an ``out=`` keyword is found however many calls
of the same target (or, for methods, of other targets) surround it, and refuses a replacement that would read the
written value; the same calls that do not write leave the rule firing.  Also: a graph class's own
``inserting_before`` places the node a one-call replacement makes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.fx

import fxrules
from tests.side_effects import assert_same

F = torch.nn.functional

RELU_TWICE = fxrules.parse("rule relu_twice: relu(relu(x)) => relu(x)")

#: A write into the first of two tensors.
Write = Callable[[torch.Tensor, torch.Tensor], object]

#: Many calls that cannot write, of the targets the writes below use (method calls are filed together by FX).
SURROUNDINGS = 40


def _surrounded(write: Write) -> Callable[..., torch.Tensor]:
    """``r = x.relu()``, ``write(x, y)``, ``r.relu()``, amid many non-writing calls of ``neg``, ``relu``,
    ``contiguous``, as methods and functions: the write is one call among hundreds of its group."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        total = y
        for _ in range(SURROUNDINGS):
            total = total.neg().contiguous() + F.relu(total) + torch.neg(total)
        r = x.relu()
        write(x, y)
        return r.relu() + total
    return f


#: Writes into ``x``, each the one writer of its kind in the graph, and the same call not writing.
WRITES: dict[str, tuple[Write, Write]] = {
    "a method that changes its receiver": (lambda x, y: x.add_(1.0), lambda x, y: x.add(1.0)),
    "inplace by keyword": (lambda x, y: F.relu(x, inplace=True), lambda x, y: F.relu(x, inplace=False)),
    "out= keyword": (lambda x, y: torch.neg(y, out=x), lambda x, y: torch.neg(y)),
}


def _inputs() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(3, 4, generator=generator), torch.randn(3, 4, generator=generator)]


def _applied(f: Callable[..., torch.Tensor]) -> tuple[fxrules.Report, list[torch.Tensor], list[torch.Tensor]]:
    """The report of RELU_TWICE on a trace of ``f`` (no shape metadata), and the outputs before and after."""
    original, rewritten = torch.fx.symbolic_trace(f), torch.fx.symbolic_trace(f)
    report = fxrules.apply(rewritten, RELU_TWICE)
    return report, [rewritten(*_inputs())], [original(*_inputs())]


@pytest.mark.parametrize("kind", list(WRITES))
def test_a_write_among_many_calls_of_its_group_refuses_a_replacement_that_would_read_it(kind: str) -> None:
    report, actual, expected = _applied(_surrounded(WRITES[kind][0]))
    assert report.counts() == {}
    assert dict(report["relu_twice"].skip_counts) == {"in-place write": 1}
    assert_same(actual, expected, "outputs")


@pytest.mark.parametrize("kind", list(WRITES))
def test_the_same_call_not_writing_leaves_the_rule_firing(kind: str) -> None:
    report, actual, expected = _applied(_surrounded(WRITES[kind][1]))
    assert report.counts() == {"relu_twice": 1}
    assert dict(report["relu_twice"].skip_counts) == {}
    assert_same(actual, expected, "outputs")


def _written_by_position(inplace: bool) -> torch.fx.GraphModule:
    """As :func:`_surrounded`, built by hand (a trace spells ``inplace`` as a keyword): ``F.relu(x, inplace)`` amid
    many ``F.relu(total)`` calls without keywords."""
    graph = torch.fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    total = y
    for _ in range(SURROUNDINGS):
        total = graph.call_function(torch.add, (total, graph.call_function(F.relu, (total,))))
    r = graph.call_method("relu", (x,))
    graph.call_function(F.relu, (x, inplace))
    graph.output(graph.call_function(torch.add, (graph.call_method("relu", (r,)), total)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("inplace", [True, False])
def test_inplace_by_position_among_many_calls_without_it_is_found(inplace: bool) -> None:
    gm = _written_by_position(inplace)
    report = fxrules.apply(gm, RELU_TWICE)
    assert report.counts() == ({} if inplace else {"relu_twice": 1})
    assert dict(report["relu_twice"].skip_counts) == ({"in-place write": 1} if inplace else {})
    assert_same([gm(*_inputs())], [_written_by_position(inplace)(*_inputs())], "outputs")


class _RecordingGraph(torch.fx.Graph):
    """A graph class with its own ``inserting_before``, which records the node each insertion goes before."""

    def __init__(self) -> None:
        super().__init__()
        self.inserted_before: list[str] = []

    def inserting_before(self, n: torch.fx.Node | None = None) -> torch.fx.graph._InsertPoint:
        self.inserted_before.append("" if n is None else n.name)
        return super().inserting_before(n)


def test_a_graph_class_s_own_inserting_before_places_a_one_call_replacement() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.relu(x)) + 1

    traced = torch.fx.symbolic_trace(f)
    graph = _RecordingGraph()
    graph.output(graph.graph_copy(traced.graph, {}))
    gm = torch.fx.GraphModule(traced, graph)
    report = fxrules.apply(gm, RELU_TWICE)
    assert report.counts() == {"relu_twice": 1}
    assert gm.graph is graph and graph.inserted_before == ["relu_1"]
    assert "relu_2 = torch.relu(x);  x = None" in gm.code
