"""The rewriter's aliasing contract: a replacement that makes an output share memory with an existing tensor (the
tensor itself, or a view of it) is applied only where no program can tell.  It is skipped with reason
``in-place write`` when the graph writes into either one through any chain of views or aliases, and with reason
``alias`` when the result is returned while the existing tensor is a graph input, a buffer or another output."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.fx

import fxrules
from tests.side_effects import assert_same, assert_same_state, observe, rewrite_unobservably, skip_reasons

F = torch.nn.functional

IDENTITY = fxrules.parse("rule same: mul(x, 1.0) => x")

#: Writes into a tensor through each kind of view or alias the rewriter follows.
WRITES: dict[str, Callable[[torch.Tensor], object]] = {
    "direct": lambda t: t.add_(1),
    "slice": lambda t: t[0:1].zero_(),
    "index": lambda t: t[1].fill_(7),
    "t": lambda t: t.t().mul_(2),
    "transpose": lambda t: t.transpose(0, 1).add_(1),
    "view": lambda t: t.view(-1).add_(1),
    "reshape": lambda t: t.reshape(-1).sub_(1),
    "unsqueeze": lambda t: t.unsqueeze(0).mul_(3),
    "squeeze-of-unsqueeze": lambda t: t.unsqueeze(0).squeeze(0).add_(2),
    "permute": lambda t: t.permute(1, 0).add_(1),
    "narrow": lambda t: t.narrow(0, 0, 1).add_(1),
    "select": lambda t: t.select(0, 1).sub_(1),
    "detach": lambda t: t.detach().zero_(),
    "split": lambda t: t.split(1)[0].fill_(3),
    "chunk": lambda t: t.chunk(3)[2].fill_(3),
    "as_strided": lambda t: t.as_strided((2,), (1,)).add_(1),
    "view-of-view": lambda t: t[0:2].t().unsqueeze(0).add_(1),
    "inplace relu": lambda t: F.relu(t.view(-1), inplace=True),
    "inplace relu by position": lambda t: F.relu(t.view(-1), True),
    "setitem": lambda t: t.__setitem__((slice(0, 1),), 0.0),
    "out=": lambda t: torch.add(torch.ones(3, 4), 1, out=t),
    "out= tuple": lambda t: torch.max(torch.ones(3, 4), 0, out=(t[0], torch.zeros(4, dtype=torch.long))),
    "keyword out of an aten overload": lambda t: torch.ops.aten.max.dim_max(
        torch.ones(3, 4), 0, max=t[0], max_values=torch.zeros(4, dtype=torch.long)),
    "list of foreach": lambda t: torch._foreach_add_([t.view(-1)], 1.0),
    "list of aten foreach": lambda t: torch.ops.aten._foreach_mul_.Scalar([torch.ones(2), t[0]], 2.0),
    "batch norm statistics": lambda t: F.batch_norm(torch.ones(2, 4), t[0], t[1], training=True, momentum=0.5),
    "torch.batch_norm statistics": lambda t: torch.batch_norm(torch.ones(2, 4), None, None, t[0], t[1], True,
                                                              0.5, 1e-5, False),
    "aten batch norm statistics": lambda t: torch.ops.aten._native_batch_norm_legit.default(
        torch.ones(2, 4), None, None, t[0], t[1], True, 0.5, 1e-5),
}


def _input() -> torch.Tensor:
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("write", WRITES.values(), ids=list(WRITES))
def test_a_write_into_the_result_through_a_view_skips_the_identity(write: Callable[[torch.Tensor], object]) -> None:
    """``y = x * 1`` then a write into ``y`` (or a view of it) must not reach ``x``."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        write(y)
        return x + y
    report, _ = rewrite_unobservably(f, [_input()], IDENTITY)
    assert report.counts() == {}
    assert skip_reasons(report, "same") == {"in-place write": 1}


@pytest.mark.parametrize("write", WRITES.values(), ids=list(WRITES))
def test_a_write_into_the_input_through_a_view_skips_the_identity(write: Callable[[torch.Tensor], object]) -> None:
    """``y = x * 1`` is a copy: a later write into ``x`` (or a view of it) must not reach ``y``."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        write(x)
        return y.relu()
    report, _ = rewrite_unobservably(f, [_input()], IDENTITY)
    assert report.counts() == {}
    assert skip_reasons(report, "same") == {"in-place write": 1}


@pytest.mark.parametrize("write", [None, *WRITES.values()], ids=["no write", *WRITES])
@pytest.mark.parametrize("into", ["result", "input"])
def test_a_write_is_seen_wherever_the_graph_holds_it(write: Callable[[torch.Tensor], object] | None,
                                                     into: str) -> None:
    """An identity on an unrelated tensor comes first and fires; the second is skipped exactly when the graph
    writes into its result or its input (the graph is searched for writes once, before the second site)."""
    def f(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        q = p * 1.0
        y = x * 1.0
        if write is not None:
            write(y if into == "result" else x)
        return q.relu() + x + y
    report, _ = rewrite_unobservably(f, [_input(), _input()], IDENTITY)
    assert report["same"].fired == (1 if write is not None else 2)
    assert skip_reasons(report, "same") == ({"in-place write": 1} if write is not None else {})


def test_a_write_an_earlier_rewrite_created_is_seen_by_later_rewrites() -> None:
    """The graph has no in-place write until a rewrite makes one: a later identity that would alias the
    written tensor is skipped."""
    rules = fxrules.parse("""
rule make_write: torch.sigmoid(t) => torch.sigmoid_(t.clone())
rule same: (x * 1.0).contiguous() => x
""")

    def f(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        first = (p * 1.0).contiguous()  # fires before the write exists
        s = torch.sigmoid(x)
        return first + (s * 1.0).contiguous()
    report, rewritten = rewrite_unobservably(f, [_input(), _input()], rules)
    assert report.counts() == {"make_write": 1, "same": 1}
    assert report["same"].skipped[0].detail == ("'sigmoid_' writes into 'clone', a view of 'sigmoid_', in place, "
                                                "and the replacement would make 'contiguous_1' share memory with "
                                                "'sigmoid_'")
    assert "contiguous_1 = mul_1.contiguous()" in rewritten.code


def test_the_skip_names_the_write_and_the_view_it_goes_through() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        y[0:1].zero_()
        return x + y
    report, _ = rewrite_unobservably(f, [_input()], IDENTITY)
    assert report["same"].skipped[0].detail == ("'zero_' writes into 'getitem', a view of 'mul', in place, and the "
                                                "replacement would make 'mul' share memory with 'x'")


def test_the_skip_names_the_argument_a_call_writes_besides_its_first() -> None:
    """A training batch norm writes its running statistics, not its input: the skip names the statistic."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        F.batch_norm(torch.ones(2, 4), torch.zeros(4), y[1], training=True)
        return x + y
    report, _ = rewrite_unobservably(f, [_input()], IDENTITY)
    assert report["same"].skipped[0].detail == ("'batch_norm' writes into 'getitem', a view of 'mul', in place, and "
                                                "the replacement would make 'mul' share memory with 'x'")


@pytest.mark.parametrize("training", [False, None], ids=["training=False", "training left out"])
def test_a_batch_norm_that_is_not_training_writes_nothing(training: bool | None) -> None:
    """In eval mode (``F.batch_norm``'s default) the running statistics are only read: the identity fires, and the
    call, whose result nothing uses, goes."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        flag = {} if training is None else {"training": training}
        F.batch_norm(torch.ones(2, 4), y[0], y[1].abs(), **flag)
        return x + y
    report, rewritten = rewrite_unobservably(f, [_input()], IDENTITY)
    assert report.counts() == {"same": 1}
    assert "batch_norm" not in rewritten.code


class _Statistics(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))


def _aten_batch_norm_after_a_read_of_its_mean(training: bool) -> torch.fx.GraphModule:
    """``mean * 1.0`` read before ``aten.batch_norm.default`` (as a training export spells it) updates ``mean``."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    mean, var = graph.get_attr("mean"), graph.get_attr("var")
    read = graph.call_function(torch.mul, (mean, 1.0))
    normalized = graph.call_function(torch.ops.aten.batch_norm.default,
                                     (x, None, None, mean, var, training, 0.5, 1e-5, False))
    graph.output((normalized, graph.call_function(torch.add, (read, 0.0))))
    return torch.fx.GraphModule(_Statistics(), graph)


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_an_aten_batch_norm_writes_its_running_statistics_when_training(training: bool) -> None:
    """An aten overload's parameters are its schema's (its Python signature is ``*args, **kwargs``): a training
    ``aten.batch_norm.default`` updates ``mean`` in place, so ``mean * 1.0`` read before it is not replaced by
    ``mean`` read after it; in eval mode it only reads, and the identity fires."""
    gm, x = _aten_batch_norm_after_a_read_of_its_mean(training), torch.randn(3, 4) + 5.0
    report = fxrules.apply(gm, IDENTITY)
    if training:
        assert skip_reasons(report, "same") == {"in-place write": 1}
    else:
        assert report.counts() == {"same": 1}
    assert_same(list(gm(x)), list(_aten_batch_norm_after_a_read_of_its_mean(training)(x)), "the outputs")


RELU_TWICE = fxrules.parse("rule relu_twice: relu(relu(x)) => relu(x)")


@pytest.mark.parametrize("write", WRITES.values(), ids=list(WRITES))
def test_a_capture_written_between_its_read_and_the_replacement_skips(write: Callable[[torch.Tensor], object]) -> None:
    """``r = x.relu()``, a write into ``x`` (or a view of it), then ``r.relu()``: the replacement ``x.relu()`` would
    go after the write and read the written ``x``."""
    def f(x: torch.Tensor) -> torch.Tensor:
        r = x.relu()
        write(x)
        return r.relu() + x
    report, _ = rewrite_unobservably(f, [_input()], RELU_TWICE)
    assert report.counts() == {}
    assert skip_reasons(report, "relu_twice") == {"in-place write": 1}


def test_a_write_before_the_match_reads_or_into_another_tensor_leaves_the_rule_firing() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(1.0)
        r = x.relu()
        y.mul_(2.0)
        return r.relu() + y
    report, _ = rewrite_unobservably(f, [_input(), _input()], RELU_TWICE)
    assert report.counts() == {"relu_twice": 1}


def test_a_capture_written_before_a_later_output_reads_it_skips() -> None:
    """With two outputs the replacement goes before the first: a write into ``x`` between the first output and a
    second that reads ``x`` would not reach the replacement's second value."""
    rules = fxrules.parse("""
rule two:
    pattern:
        a = torch.neg(x)
        b = torch.relu(x)
        return a, b
    replace:
        return torch.abs(x), torch.sigmoid(x)
""")

    def f(x: torch.Tensor) -> torch.Tensor:
        a = torch.neg(x)
        x.add_(1.0)
        return a + torch.relu(x)
    report, _ = rewrite_unobservably(f, [_input()], rules)
    assert skip_reasons(report, "two") == {"in-place write": 1}


def test_the_skip_names_the_write_between_the_read_and_the_replacement() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        r = x.relu()
        x.t().mul_(2.0)
        return r.relu()
    report, _ = rewrite_unobservably(f, [_input()], RELU_TWICE)
    assert report["relu_twice"].skipped[0].detail == ("'mul_' writes into 'x' in place between where the match reads "
                                                      "it and 'relu_1', where the replacement would")


class _AddOneInPlace(torch.nn.Module):
    def forward(self, t: torch.Tensor) -> torch.Tensor:
        t.add_(1.0)
        return t.sum()


class _CallsAPart(torch.nn.Module):
    def __init__(self, part: torch.nn.Module) -> None:
        super().__init__()
        self.part = part

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        return x + self.part(y)


class _KeepsModules(torch.fx.Tracer):
    """Calls the graph modules and ``_AddOneInPlace`` as submodules (``split_module`` leaves such calls)."""

    def is_leaf_module(self, m: torch.nn.Module, qualified_name: str) -> bool:
        return isinstance(m, torch.fx.GraphModule | _AddOneInPlace) or super().is_leaf_module(m, qualified_name)


def _with_part(part: Callable[[], torch.nn.Module]) -> torch.fx.GraphModule:
    model = _CallsAPart(part())
    return torch.fx.GraphModule(model, _KeepsModules().trace(model))


def _rewritten_like_the_original(part: Callable[[], torch.nn.Module]) -> fxrules.Report:
    original, rewritten = _with_part(part), _with_part(part)
    report = fxrules.apply(rewritten, IDENTITY)
    expected, actual = observe(original, [_input()]), observe(rewritten, [_input()])
    assert_same(actual.outputs, expected.outputs, "outputs")
    assert_same_state(actual.after_call, expected.after_call, "after the call:", 0.0)
    return report


def test_a_graph_module_called_as_a_submodule_writes_what_its_graph_writes() -> None:
    """A submodule that is a graph module writing into its input (``t.add_(1)``) writes into the argument the call
    gives it: the identity whose result that is stays."""
    report = _rewritten_like_the_original(lambda: torch.fx.symbolic_trace(_AddOneInPlace()))
    assert skip_reasons(report, "same") == {"in-place write": 1}


def test_an_opaque_submodule_writing_into_its_input_is_a_write() -> None:
    """What a leaf module's Python ``forward`` writes into cannot be read from the graph."""
    report = _rewritten_like_the_original(_AddOneInPlace)
    assert skip_reasons(report, "same") == {"in-place write": 1}


def _relu_twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.relu()
    return y, y * 1.0


@pytest.mark.parametrize("source", [
    pytest.param(lambda x: x * 1.0, id="the input"),
    pytest.param(lambda x: x.t() * 1.0, id="a view of the input"),
    pytest.param(lambda x: (x * 1.0).t(), id="a view of the result"),
    pytest.param(lambda x: _relu_twice(x), id="another output"),
])
def test_a_returned_result_is_not_made_to_share_memory_with_an_input_or_another_output(
        source: Callable[[torch.Tensor], object]) -> None:
    """A caller writing into the result would write into its input (or into the other output)."""
    gm = torch.fx.symbolic_trace(source)
    report, rewritten = rewrite_unobservably(source, [_input()], IDENTITY)
    assert report.counts() == {}
    assert skip_reasons(report, "same") == {"alias": 1}
    assert rewritten.code == gm.code


def test_a_returned_result_is_not_made_a_parameter() -> None:
    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3, 4), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.w * 1.0
    report, _ = rewrite_unobservably(Scaled(), [_input()], IDENTITY)
    assert report["same"].skipped[0].detail == ("'mul' is returned, and the replacement would make it share memory "
                                                "with the attribute 'w': a caller writing into the result would "
                                                "change it")


def test_identities_without_writes_or_returned_inputs_still_rewrite() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1.0
        z = y.t()[0:2]  # views, but nothing writes
        w = x.relu()
        w.add_(1)  # a write into an unrelated tensor
        return z.sum() + w
    report, rewritten = rewrite_unobservably(f, [_input()], IDENTITY)
    assert report.counts() == {"same": 1}
    assert "t = x.t()" in rewritten.code and "1.0" not in rewritten.code


def test_a_computed_result_may_be_returned() -> None:
    report, rewritten = rewrite_unobservably(lambda x: x.relu() * 1.0, [_input()], IDENTITY)
    assert report.counts() == {"same": 1}
    assert "return relu" in rewritten.code


def test_a_replacement_that_views_what_the_output_viewed_is_not_checked() -> None:
    """``x.t().t()`` is a view of ``x`` already: returning ``x`` changes nothing a write can see."""
    rules = fxrules.parse("rule tt: x.t().t() => x")
    report, rewritten = rewrite_unobservably(lambda x: x.t().t(), [_input()], rules)
    assert report.counts() == {"tt": 1}
    assert "return x" in rewritten.code


def test_a_new_view_of_an_input_is_checked_like_the_input() -> None:
    """``reshape(reshape(x, a), b) => reshape(x, b)``: the first reshape of a transposed ``x`` copies, the new
    one may view ``x``; returned, the caller's write would reach the input."""
    rules = fxrules.parse("rule chain: reshape(reshape(x, a), b) => reshape(x, b)")
    report, _ = rewrite_unobservably(lambda x: x.t().reshape(-1).reshape(3, 4) * 2, [_input()], rules)
    assert report.counts() == {"chain": 1}
    report, _ = rewrite_unobservably(lambda x: x.reshape(-1).reshape(4, 3), [_input()], rules)
    assert skip_reasons(report, "chain") == {"alias": 1}


def test_dropout_that_returns_its_input_is_removed_even_when_returned() -> None:
    """``F.dropout(x, training=False)`` returns ``x`` itself: removing it changes no aliasing."""
    rules = fxrules.parse("rule drop: dropout(x, training=False, ...) => x")
    report, rewritten = rewrite_unobservably(lambda x: F.dropout(x, 0.1, training=False), [_input()], rules)
    assert report.counts() == {"drop": 1}
    assert "return x" in rewritten.code


def test_is_mutated_sees_writes_through_views() -> None:
    rules = fxrules.parse("""
rule drop_clone:
    pattern:
        c = x.clone()
        return c
    where:
        not is_mutated(c)
    replace:
        return x
""")

    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.relu().clone()
        c.t()[0].zero_()
        return c * 2
    report, _ = rewrite_unobservably(f, [_input()], rules)
    assert skip_reasons(report, "drop_clone") == {"guard false": 1}


IDENTITY_AND_COPY = fxrules.parse("""
rule same: mul(x, 1.0) => x
rule copy: x.contiguous() => x
""")


def _view_joined_to_a_returned_one(x: torch.Tensor) -> object:
    """``same`` makes ``t`` a view of ``r``, which the returned ``kept`` views too."""
    r = x.relu()
    kept = r.view(-1)
    t = (r * 1.0).t()
    return kept, t.contiguous().sum()


def _view_of_a_newly_returned_value(x: torch.Tensor) -> object:
    """``same`` makes ``a``, which ``t`` views, the returned value."""
    a = x.relu()
    return a * 1.0, a.t().contiguous().sum()


@pytest.mark.parametrize("source", [
    pytest.param(_view_joined_to_a_returned_one, id="a view joined to a returned one"),
    pytest.param(_view_of_a_newly_returned_value, id="a view of a newly returned value"),
])
def test_a_rewrite_that_shares_memory_with_a_returned_value_is_seen_by_the_later_ones(
        source: Callable[[torch.Tensor], object]) -> None:
    """Which values share memory with a returned one changes as rules fire: after ``same`` rewrote, the
    ``contiguous()`` of ``t`` may be a returned value's memory, and ``copy`` is checked like any rewrite of such
    a value (skipped: its replacement ``t`` shares memory with the returned value)."""
    report, rewritten = rewrite_unobservably(source, [_input()], IDENTITY_AND_COPY)
    assert report.counts() == {"same": 1}
    assert skip_reasons(report, "copy") == {"alias": 1}
    assert ".contiguous()" in rewritten.code


def test_a_node_a_sequence_replacement_returns_is_seen_as_returned_by_the_later_rewrites() -> None:
    """``pair`` makes ``n`` itself returned (in the tuple that replaces a returned value): the ``contiguous()`` of
    ``n`` may then be a returned value's memory, and ``copy``, which would replace it by ``n``, is skipped."""
    rules = fxrules.parse("rule pair: torch.broadcast_tensors(x, y) => (x, y)\n"
                          "rule copy: x.contiguous() => x\n")

    def f(a: torch.Tensor, b: torch.Tensor) -> object:
        n = a.relu()
        return torch.broadcast_tensors(n, b.relu()), n.contiguous().sum()
    rewritten = torch.fx.symbolic_trace(f)
    report = fxrules.apply(rewritten, rules)
    assert report.counts() == {"pair": 1}
    assert skip_reasons(report, "copy") == {"alias": 1}
    assert ".contiguous()" in rewritten.code


def _many_buffers(count: int, linear: bool = False) -> torch.fx.GraphModule:
    """``count`` buffers read at the top (as an exported graph reads its parameters), the first written in place
    below every read, then ``x + b_i * 1`` for each (given to an ``nn.Linear`` ``l_i`` if ``linear``): every
    rewrite asks for the alias class of a buffer, and which module calls may write it."""
    root = torch.nn.Module()
    for i in range(count):
        root.register_buffer(f"b{i}", torch.full((2,), float(i)))
        if linear:
            setattr(root, f"l{i}", torch.nn.Linear(2, 2))
    graph = torch.fx.Graph()
    total = graph.placeholder("x")
    reads = [graph.get_attr(f"b{i}") for i in range(count)]
    graph.call_method("add_", (reads[0], 1.0))
    for read in reads:
        total = graph.call_function(torch.add, (total, graph.call_function(torch.mul, (read, 1.0))))
        if linear:
            total = graph.call_module(f"l{read.target[1:]}", (total,))
    graph.output(total)
    return torch.fx.GraphModule(root, graph)


@pytest.mark.parametrize("linear", [False, True], ids=["buffers", "buffers and modules"])
def test_apply_looks_each_attribute_up_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch,
                                                                  linear: bool) -> None:
    """Finding the reads of one attribute's memory (the same attribute, a tied tensor) and the module calls that may
    write it does not look up every attribute and module of the graph again for each read asked about: on a graph
    of 300 buffers (and 300 ``nn.Linear`` calls) apply looks each up a few times, not once per other read (which
    made apply quadratic in the parameters of an aten graph), and still refuses the one rewrite whose buffer is
    written in place."""
    gm = _many_buffers(300, linear)
    original = copy.deepcopy(gm)  # a call writes b0: the outputs are compared one call each
    lookups: list[str] = []
    lookup = torch.nn.Module.__getattr__

    def counting(module: torch.nn.Module, name: str) -> object:
        lookups.append(name)
        return lookup(module, name)

    monkeypatch.setattr(torch.nn.Module, "__getattr__", counting)
    report = fxrules.apply(gm, IDENTITY)
    monkeypatch.undo()
    assert sum(name[:1] in "bl" and name[1:].isdigit() for name in lookups) < 10 * 300
    assert report.counts() == {"same": 299}
    assert len(gm.graph.find_nodes(op="call_function", target=torch.mul)) == 1
    assert torch.equal(gm(torch.ones(2)), original(torch.ones(2)))


def test_a_tied_buffer_reassigned_between_two_applies_is_seen_by_the_second() -> None:
    """Which reads share memory is decided from the module as it is at each ``apply``: a buffer made the same
    tensor as the one the graph writes after the first apply is in its alias class at the second."""
    root = torch.nn.Module()
    root.register_buffer("a", torch.ones(2))
    root.register_buffer("b", torch.zeros(2))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    read_b = graph.get_attr("b")
    read_a = graph.get_attr("a")
    before = graph.call_function(torch.mul, (read_b, 1.0))
    graph.call_method("add_", (read_a, 1.0))
    graph.output(graph.call_function(torch.add, (x, before)))
    gm = torch.fx.GraphModule(root, graph)
    unrelated = fxrules.parse("rule never: torch.neg(torch.neg(x)) => x")
    fxrules.apply(gm, unrelated)
    gm.b = gm.a  # now b is a, which the graph writes after reading b
    assert skip_reasons(fxrules.apply(gm, IDENTITY), "same") == {"in-place write": 1}


UNSTACK = "rule unstack: torch.unbind(torch.stack([a, b])) => (a, b)\n"


def test_a_sequence_replacing_a_returned_value_is_checked_for_each_of_its_nodes() -> None:
    """A caller reading ``parts[0]`` of the tuple that replaced ``unbind`` reads ``x`` itself: returned, it would
    share memory with the graph input (the unbound parts were views of the new stacked tensor), so the rewrite
    is skipped."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.unbind(torch.stack([x, y]))[0]
    report, rewritten = rewrite_unobservably(f, [_input(), _input()], fxrules.parse(UNSTACK))
    assert skip_reasons(report, "unstack") == {"alias": 1}
    assert "torch.stack" in rewritten.code


def test_an_item_of_a_sequence_replacement_shares_memory_with_what_reads_it() -> None:
    """After ``unstack``, the returned ``parts[0]`` is ``(mul, mul_1)[0]``, which is ``mul``: a later ``x * 1.0 =>
    x`` would return the graph input itself, and is skipped."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.unbind(torch.stack([x * 1.0, y * 2.0]))[0]
    gm = torch.fx.symbolic_trace(f)
    assert fxrules.apply(gm, fxrules.parse(UNSTACK)).counts() == {"unstack": 1}
    report = fxrules.apply(gm, IDENTITY)
    assert skip_reasons(report, "same") == {"alias": 1}
    inputs = [_input(), _input()]
    assert_same([gm(*inputs)], [f(*inputs)], "the output")
    assert gm(*inputs).data_ptr() != inputs[0].data_ptr()
