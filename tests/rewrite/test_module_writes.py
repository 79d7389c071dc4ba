"""What a submodule call writes besides its result counts as a write: a training normalization's running
statistics, an ``nn.Embedding``'s weight renormalized to ``max_norm``, what a graph module's graph writes into its
own attributes, and, for a module whose code fxrules cannot read (a class of user code, hooks, a lazy module),
every argument and all of its state.  A read of such state is not moved past the call, and an unused call that
writes is not removed; a module that writes nothing (an eval-mode BatchNorm, a plain ``nn.Linear``) lets the
rewrite happen.  Two reads of one attribute (or of one tensor under two names) are the same memory: a write
through one is a write into the other.  Each case compares the outputs, the inputs and every parameter and buffer
after the call with the original module's."""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.fx

import fxrules
from tests.side_effects import assert_same, assert_same_state, observe, skip_reasons

nn = torch.nn

IDENTITY = fxrules.parse("rule same:\n    x * 1 => x\n")
RELU_TWICE = fxrules.parse("rule once:\n    torch.relu(torch.relu(x)) => torch.relu(x)\n")


def _applied(gm: torch.fx.GraphModule, rules: fxrules.RuleSet,
             inputs: list[torch.Tensor]) -> tuple[fxrules.Report, torch.fx.GraphModule]:
    """Apply ``rules`` to ``gm`` and assert that a copy of it made before (returned, called) shows the same
    outputs, inputs and state (the parameters and buffers both have) after a call and after a write into the
    outputs."""
    original = copy.deepcopy(gm)
    report = fxrules.apply(gm, rules)
    gm.graph.lint()
    torch.manual_seed(0)  # a lazy module's first call draws its parameters
    expected = observe(original, inputs)
    torch.manual_seed(0)
    actual = observe(gm, inputs)
    assert_same(actual.outputs, expected.outputs, "outputs")
    assert_same_state(actual.after_call, expected.after_call, "after the call:", 0.0)
    assert_same_state(actual.after_write, expected.after_write, "after a write into the outputs:", 0.0)
    return report, original


def _reads_then_calls(module: nn.Module, attribute: str) -> torch.fx.GraphModule:
    """``before = m.<attribute> * 1; called = m(x); return called, before + 0.5``: the identity would make the
    read of the attribute happen where ``before + 0.5`` is, after the call."""
    root = nn.Module()
    root.m = module
    return _reads_then_calls_m(root, f"m.{attribute}")


def _reads_then_calls_m(root: nn.Module, path: str) -> torch.fx.GraphModule:
    """``before = <path> * 1; called = m(x); return called, before + 0.5`` on ``root``, whose ``m`` is called."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    before = graph.call_function(operator.mul, (graph.get_attr(path), 1))
    called = graph.call_module("m", (x,))
    graph.output((called, graph.call_function(operator.add, (before, 0.5))))
    return torch.fx.GraphModule(root, graph)


def _features() -> torch.Tensor:
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0))


class _Counts(nn.Module):
    """A leaf of user code with an effect no tensor shows: it counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x + 1


class _Returns(nn.Module):
    """A leaf of user code that returns its input itself."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _AddsToBuffer(nn.Module):
    """A leaf of user code that writes into its own buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.add_(x.sum(0))
        return x * 2


def _graph_module_adding_to_its_buffer() -> torch.fx.GraphModule:
    """A graph module whose graph writes into its own attribute: ``self.buf.add_(1); return x + self.buf``."""
    holder = nn.Module()
    holder.register_buffer("buf", torch.zeros(3))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    buf = graph.get_attr("buf")
    graph.call_method("add_", (buf, 1.0))
    graph.output(graph.call_function(operator.add, (x, buf)))
    return torch.fx.GraphModule(holder, graph)


class _PlainBatchNorm(nn.BatchNorm1d):
    """A subclass of torch's that adds no code a call runs (only ``__init__``): it runs torch's forward."""

    def __init__(self) -> None:
        super().__init__(3)


class _PlainLinear(nn.Linear):
    """A subclass of torch's ``nn.Linear`` that adds no code a call runs."""

    def __init__(self) -> None:
        super().__init__(3, 3)


class _CountingLinear(nn.Linear):
    """A subclass of torch's ``nn.Linear`` whose own forward has an effect no tensor shows."""

    def __init__(self) -> None:
        super().__init__(3, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return super().forward(x)


#: Modules that write state of their own when called, the attribute read before the call, and an input.
WRITERS: dict[str, tuple[Callable[[], nn.Module], str, Callable[[], torch.Tensor]]] = {
    "training BatchNorm1d": (lambda: nn.BatchNorm1d(3).train(), "running_mean", _features),
    "its batch count": (lambda: nn.BatchNorm1d(3, momentum=None).train(), "num_batches_tracked", _features),
    "training InstanceNorm1d tracking statistics": (
        lambda: nn.InstanceNorm1d(3, track_running_stats=True).train(), "running_var",
        lambda: torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))),
    "a training BatchNorm1d in a Sequential": (
        lambda: nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)).train(), "1.running_mean", _features),
    "Embedding with max_norm": (lambda: nn.Embedding(5, 3, max_norm=0.5), "weight",
                                lambda: torch.tensor([0, 2, 4])),
    "a leaf of user code": (_AddsToBuffer, "seen", _features),
    "a training subclass of BatchNorm1d adding no code": (lambda: _PlainBatchNorm().train(), "running_mean",
                                                          _features),
    "a graph module writing its attribute": (_graph_module_adding_to_its_buffer, "buf", _features),
}


@pytest.mark.parametrize("name", list(WRITERS))
def test_a_read_of_state_the_call_writes_is_not_moved_past_it(name: str) -> None:
    make, attribute, inputs = WRITERS[name]
    gm = _reads_then_calls(make(), attribute)
    report, _ = _applied(gm, IDENTITY, [inputs()])
    read = f"m_{attribute.replace('.', '_')}"
    assert report["same"].skipped[0].reason.value == "in-place write"
    assert report["same"].skipped[0].detail == (f"'m' writes into '{read}' in place, and the replacement would make "
                                                f"'mul' share memory with '{read}'")


def test_a_write_of_state_between_a_read_and_the_replacement_skips() -> None:
    """``r = relu(m.running_mean); m(x); relu(r)``: the replacement ``relu(m.running_mean)`` would go where the
    second relu is, after the call updated the statistics."""
    root = nn.Module()
    root.m = nn.BatchNorm1d(3).train()
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    first = graph.call_function(torch.relu, (graph.get_attr("m.running_mean"),))
    called = graph.call_module("m", (x,))
    graph.output((called, graph.call_function(torch.relu, (first,))))
    report, _ = _applied(torch.fx.GraphModule(root, graph), RELU_TWICE, [_features()])
    assert report.counts() == {}
    assert report["once"].skipped[0].detail == ("'m' writes into 'm_running_mean' in place between where the match "
                                                "reads it and 'relu_1', where the replacement would")


def test_a_forward_set_on_the_module_makes_its_call_a_possible_write() -> None:
    """``m.forward = torch.relu_`` on an ``nn.Identity`` makes its call write its input, although the function is
    torch's: ``y = c * 1; m(c); y + 0.5`` keeps its multiplication, which would otherwise read ``c`` after the
    call zeroed its negative values."""
    root = nn.Module()
    root.m = nn.Identity()
    root.m.forward = torch.relu_
    graph = torch.fx.Graph()
    copied = graph.call_function(torch.clone, (graph.placeholder("x"),))
    before = graph.call_function(operator.mul, (copied, 1))
    called = graph.call_module("m", (copied,))
    graph.output((called, graph.call_function(operator.add, (before, 0.5))))
    report, _ = _applied(torch.fx.GraphModule(root, graph), IDENTITY, [_features()])
    assert report.counts() == {}
    assert report["same"].skipped[0].reason.value == "in-place write"


class _Cache:
    """A plain object holding tensors, as a key-value cache object does."""

    def __init__(self, key: torch.Tensor) -> None:
        self.key = key


class _WritesItsCache(nn.Module):
    def __init__(self, cache: _Cache) -> None:
        super().__init__()
        self.cache = cache

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache.key.add_(x.sum())
        return x


def test_a_call_of_user_code_may_write_any_attribute_the_graph_reads() -> None:
    """A module of user code may write tensors it reaches other than under its name (here the root's buffer,
    held by a cache object): ``before = k * 1; m(x); before + 0.5`` keeps its multiplication, which would
    otherwise read ``k`` after the call updated it."""
    root = nn.Module()
    root.register_buffer("k", torch.zeros(3))
    root.m = _WritesItsCache(_Cache(root.k))
    report, _ = _applied(_reads_then_calls_m(root, "k"), IDENTITY, [_features()])
    assert report.counts() == {}
    assert report["same"].skipped[0].detail == ("'m' writes into 'k' in place, and the replacement would make "
                                                "'mul' share memory with 'k'")


def test_a_module_set_training_between_two_applies_writes_at_the_second() -> None:
    """What a module call writes is decided at each ``apply`` from the module as it is then: a BatchNorm set to
    training after an ``apply`` that saw it in eval mode writes its running statistics at the next one."""
    gm = _reads_then_calls(nn.BatchNorm1d(3).eval(), "running_mean")
    fxrules.apply(gm, fxrules.parse("rule never: torch.neg(torch.neg(x)) => x"))
    gm.m.train()
    report, _ = _applied(gm, IDENTITY, [_features()])
    assert report.counts() == {}
    assert report["same"].skipped[0].reason.value == "in-place write"


@pytest.mark.parametrize("make", [
    pytest.param(lambda: nn.BatchNorm1d(3).eval(), id="eval-mode BatchNorm1d"),
    pytest.param(lambda: nn.BatchNorm1d(3, track_running_stats=False).train(), id="BatchNorm1d without statistics"),
    pytest.param(lambda: nn.Linear(3, 3), id="Linear"),
    pytest.param(_PlainLinear, id="a subclass of Linear adding no code"),
    pytest.param(lambda: _PlainBatchNorm().eval(), id="an eval-mode subclass of BatchNorm1d adding no code"),
])
def test_a_module_that_writes_no_state_lets_the_rewrite_happen(make: Callable[[], nn.Module]) -> None:
    module = make()
    attribute = "weight" if isinstance(module, nn.Linear) or not module.track_running_stats else "running_mean"
    gm = _reads_then_calls(module, attribute)
    report, _ = _applied(gm, IDENTITY, [_features()])
    assert report.counts() == {"same": 1}
    assert "operator.mul" not in gm.code


@pytest.fixture
def hook_on_every_module() -> Iterator[None]:
    """A global forward pre-hook adding 1 to every module's first input, removed after the test."""
    handle = nn.modules.module.register_module_forward_pre_hook(lambda module, args: args[0].add_(1))
    yield
    handle.remove()


def _identity_then_linear(linear: nn.Linear) -> torch.fx.GraphModule:
    """``before = x * 1; y = linear(x); return y + before``."""
    root = nn.Module()
    root.m = linear
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    before = graph.call_function(operator.mul, (x, 1))
    graph.output(graph.call_function(operator.add, (graph.call_module("m", (x,)), before)))
    return torch.fx.GraphModule(root, graph)


def test_a_linear_with_a_hook_writing_its_input_writes_it() -> None:
    linear = nn.Linear(3, 3)
    linear.register_forward_pre_hook(lambda module, args: args[0].add_(1))
    report, _ = _applied(_identity_then_linear(linear), IDENTITY, [_features()])
    assert report.counts() == {}
    assert skip_reasons(report, "same") == {"in-place write": 1}


@pytest.mark.usefixtures("hook_on_every_module")
def test_a_global_module_hook_makes_every_module_call_a_possible_write() -> None:
    report, _ = _applied(_identity_then_linear(nn.Linear(3, 3)), IDENTITY, [_features()])
    assert skip_reasons(report, "same") == {"in-place write": 1}


def test_a_linear_without_hooks_writes_nothing() -> None:
    gm = _identity_then_linear(nn.Linear(3, 3))
    report, _ = _applied(gm, IDENTITY, [_features()])
    assert report.counts() == {"same": 1}


@pytest.mark.parametrize(("make", "detail"), [
    pytest.param(lambda: nn.Sequential(nn.Identity(), nn.Dropout(0.5).eval()),
                 "'mul' is returned, and the replacement would make it share memory with the graph input 'x': a "
                 "caller writing into the result would change it", id="a Sequential of aliasing steps"),
    pytest.param(lambda: nn.Sequential(_Returns()),
                 "'m' writes into 'x', a view of 'm', in place, and the replacement would make 'mul' share memory "
                 "with 'm'", id="a Sequential of user code"),
    pytest.param(_Returns, "'m' writes into 'x', a view of 'm', in place, and the replacement would make 'mul' share "
                 "memory with 'm'", id="a leaf of user code"),
])
def test_a_module_may_return_its_input_itself(make: Callable[[], nn.Module], detail: str) -> None:
    """``return m(x) * 1``: made ``return m(x)``, the caller would get ``x`` itself (which a leaf of user code may
    also have written, and a write into the result would change the input)."""
    root = nn.Module()
    root.m = make()
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(operator.mul, (graph.call_module("m", (x,)), 1)))
    report, _ = _applied(torch.fx.GraphModule(root, graph), IDENTITY, [_features()])
    assert report.counts() == {}
    assert report["same"].skipped[0].detail == detail


def _unused_call_and_identity(module: nn.Module) -> torch.fx.GraphModule:
    """``m(x)``, its result unused, and ``return (x + 0.5) * 1``: the identity fires, and the commit removes dead
    code."""
    root = nn.Module()
    root.m = module
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_module("m", (x,))
    graph.output(graph.call_function(operator.mul, (graph.call_function(operator.add, (x, 0.5)), 1)))
    return torch.fx.GraphModule(root, graph)


@pytest.mark.parametrize("make", [
    pytest.param(lambda: nn.BatchNorm1d(3).train(), id="training BatchNorm1d"),
    pytest.param(_Counts, id="a leaf of user code"),
    pytest.param(_CountingLinear, id="a subclass of Linear with its own forward"),
    pytest.param(lambda: nn.LazyLinear(3), id="a lazy module"),
    pytest.param(_graph_module_adding_to_its_buffer, id="a graph module writing its attribute"),
])
def test_an_unused_call_that_writes_stays(make: Callable[[], nn.Module]) -> None:
    gm = _unused_call_and_identity(make())
    report, original = _applied(gm, IDENTITY, [_features()])
    assert report.counts() == {"same": 1}
    assert "self.m(x)" in gm.code
    assert type(gm.m).__name__ == type(original.m).__name__  # a lazy module became a Linear in both
    assert getattr(gm.m, "calls", None) == getattr(original.m, "calls", None)


@pytest.mark.parametrize("make", [
    pytest.param(lambda: nn.BatchNorm1d(3).eval(), id="eval-mode BatchNorm1d"),
    pytest.param(lambda: nn.Linear(3, 3), id="Linear"),
    pytest.param(_PlainLinear, id="a subclass of Linear adding no code"),
])
def test_an_unused_call_that_writes_nothing_is_removed(make: Callable[[], nn.Module]) -> None:
    gm = _unused_call_and_identity(make())
    report, _ = _applied(gm, IDENTITY, [_features()])
    assert report.counts() == {"same": 1}
    assert "self.m" not in gm.code


def test_a_tied_tensor_written_under_another_name_is_written() -> None:
    """The attribute read is the buffer of the training BatchNorm under another module's name."""
    root = nn.Module()
    root.m = nn.BatchNorm1d(3).train()
    root.other = nn.Module()
    root.other.register_buffer("alias", root.m.running_mean)
    report, _ = _applied(_reads_then_calls_m(root, "other.alias"), IDENTITY, [_features()])
    assert skip_reasons(report, "same") == {"in-place write": 1}


def test_a_rule_removing_a_call_of_user_code_is_refused() -> None:
    """A pattern matching any module (``m: nn.Module``) would remove the call, and with it what it may write."""
    root = nn.Module()
    root.m = _Counts()
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.neg, (graph.call_function(torch.neg, (graph.call_module("m", (x,)),)),)))
    rules = fxrules.parse("rule drop:\n    given:\n        m: nn.Module\n    pattern:\n"
                          "        return torch.neg(torch.neg(m(x)))\n    replace:\n        return x + 0\n")
    gm = torch.fx.GraphModule(root, graph)
    report, original = _applied(gm, rules, [_features()])
    assert gm.m.calls == original.m.calls == 1
    assert report["drop"].skipped[0].reason.value == "impure"
    assert report["drop"].skipped[0].detail == ("'m' writes into 'x', and the replacement, which would remove it, "
                                                "does not do the same")


def _two_reads(second: str, write: Callable[[torch.fx.Graph, torch.fx.Node], object]) -> torch.fx.GraphModule:
    """``before = <w> * 1`` through one ``get_attr``, a write through another of ``second``, then
    ``before + 0.5``: the identity would make ``before + 0.5`` read what the write left."""
    root = nn.Module()
    root.w = nn.Parameter(torch.zeros(3), requires_grad=False)
    root.tied = root.w
    root.register_buffer("base", torch.zeros(2, 3))
    graph = torch.fx.Graph()
    graph.placeholder("x")
    before = graph.call_function(operator.mul, (graph.get_attr("w"), 1))
    write(graph, graph.get_attr(second))
    graph.output(graph.call_function(operator.add, (before, 0.5)))
    return torch.fx.GraphModule(root, graph)


@pytest.mark.parametrize("second", ["w", "tied"], ids=["the same attribute", "a tied name"])
def test_a_write_through_another_read_of_an_attribute_is_a_write_into_it(second: str) -> None:
    """Two ``get_attr`` nodes of one attribute (or of one tensor under two names) read the same memory."""
    gm = _two_reads(second, lambda graph, other: graph.call_method("add_", (other, 1)))
    report, _ = _applied(gm, IDENTITY, [_features()])
    assert report.counts() == {}
    assert report["same"].skipped[0].detail == (
        f"'add_' writes into '{'w_1' if second == 'w' else 'tied'}', which reads the memory of 'w', in place, and "
        "the replacement would make 'mul' share memory with 'w'")


def test_a_read_is_not_moved_past_a_write_through_another_read_of_the_attribute() -> None:
    """``r = relu(w); w'.add_(1); relu(r)`` keeps its first relu before the write made through another
    ``get_attr`` of ``w``."""
    root = nn.Module()
    root.w = nn.Parameter(torch.full((3,), -0.5), requires_grad=False)
    graph = torch.fx.Graph()
    graph.placeholder("x")
    first = graph.call_function(torch.relu, (graph.get_attr("w"),))
    graph.call_method("add_", (graph.get_attr("w"), 1))
    graph.output(graph.call_function(torch.relu, (first,)))
    report, _ = _applied(torch.fx.GraphModule(root, graph), RELU_TWICE, [_features()])
    assert skip_reasons(report, "once") == {"in-place write": 1}


def test_reads_of_two_attributes_without_a_write_still_rewrite() -> None:
    """Without a write, two reads of one attribute change nothing: the identity goes."""
    root = nn.Module()
    root.w = nn.Parameter(torch.zeros(3), requires_grad=False)
    graph = torch.fx.Graph()
    graph.placeholder("x")
    before = graph.call_function(operator.mul, (graph.get_attr("w"), 1))
    graph.output(graph.call_function(operator.add, (before, graph.get_attr("w"))))
    report, _ = _applied(torch.fx.GraphModule(root, graph), IDENTITY, [_features()])
    assert report.counts() == {"same": 1}
