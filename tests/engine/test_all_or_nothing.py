"""All or nothing: whatever fails in ``apply``, at whatever point, leaves every graph module exactly as it was.

A failure is injected at every step of the commit (dead-code erasure, lint, code generation, recompile,
submodule and buffer deletion, each nested subgraph's commit, an exported program's rebuild), as an
exception and as a ``KeyboardInterrupt``, through the public torch.fx seams (the lint and the erasure of a
dead node through fxrules' own, ``fxrules.rewrite.lint.lint`` and ``fxrules.rewrite.transaction.erase_node``);
and a ``KeyboardInterrupt`` lands at a random call inside ``apply``.  Each time ``apply`` raises what was
raised, the snapshot (node objects, names, arguments, users in order, metadata, code, submodules, parameters
and buffers, in every subgraph) is unchanged, and a second ``apply`` rewrites the module into one that
computes what it did.  Also: new nodes get metadata from fake tensors only; nothing a rule names runs on real values.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import operator
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import hypothesis.strategies as st
import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from torch._subclasses.fake_tensor import FakeTensor

import fxrules
from fxrules.rewrite import lint, transaction
from tests.conftest import EVAL_MODE_FOLD, fold_rule

# ---------------------------------------------------------------- what "exactly as it was" means


def _graph_state(module: torch.fx.GraphModule) -> dict[str, Any]:
    graph = module.graph
    ids = {node: index for index, node in enumerate(graph.nodes)}

    def arg(value: Any) -> Any:
        return torch.fx.node.map_arg(value, lambda n: ("node", ids.get(n, n.name)))

    nodes = [(node, node.name, node.op, str(node.target), arg(node.args), arg(dict(node.kwargs)),
              [user.name for user in node.users], id(node.meta), list(node.meta),
              {key: id(value) for key, value in node.meta.items()}) for node in graph.nodes]
    lookups = {(node.op, node.target if node.op == "call_function" else None) for node in graph.nodes}
    return {"nodes": nodes, "len": len(graph.nodes), "code": module.code, "forward": type(module).forward,
            "code transformer": graph._codegen._body_transformer,  # what later recompiles write (the spelling)
            "find_nodes": {key: graph.find_nodes(op=key[0], target=key[1], sort=False) for key in lookups}}


def snapshot(gm: torch.nn.Module) -> dict[str, Any]:
    """Every graph module under ``gm`` (nodes, their users in order, meta, code), every submodule, and every
    parameter and buffer by identity and value."""
    return {
        "modules": [(name, module) for name, module in gm.named_modules(remove_duplicate=False)],
        "graphs": {name: _graph_state(module) for name, module in gm.named_modules()
                   if isinstance(module, torch.fx.GraphModule)},
        "tensors": [(name, tensor, tensor.detach().clone()) for name, tensor in
                    [*gm.named_parameters(remove_duplicate=False), *gm.named_buffers(remove_duplicate=False)]],
    }


def assert_unchanged(before: dict[str, Any], gm: torch.nn.Module) -> None:
    after = snapshot(gm)
    assert after["modules"] == before["modules"]
    assert after["graphs"].keys() == before["graphs"].keys()
    for name, state in before["graphs"].items():
        for key, value in state.items():
            assert after["graphs"][name][key] == value, (name or "<root>", key)
        module = gm.get_submodule(name)
        module.graph.lint()
    assert [(name, t) for name, t, _ in after["tensors"]] == [(name, t) for name, t, _ in before["tensors"]]
    for (name, tensor, _), (_, _, value) in zip(after["tensors"], before["tensors"], strict=True):
        assert torch.equal(tensor, value), name


# ---------------------------------------------------------------- the models


class Traced(torch.nn.Module):
    """Rewrites that fold a conv and a batch norm into a new conv (two submodules left unused), add and then
    drop a helper's buffer (left unused), and one skipped halfway (a node made, then taken back)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        return torch.neg(torch.neg(y)) * self.scale + torch.relu(torch.relu(y)) + torch.sigmoid(y)


TRACED_RULES = fxrules.parse(fold_rule("fold", "fold_conv_bn", EVAL_MODE_FOLD) + """
rule neg_twice:
    torch.neg(torch.neg(x)) => x + @zero()

rule add_zero_attribute:
    given:
        z: Attr
    pattern:
        return x + z
    where:
        z.target == "zero"
    replace:
        return x

rule relu_twice:
    torch.relu(torch.relu(x)) => torch.relu(x)

rule skipped_halfway:
    torch.sigmoid(x) => torch.relu(x) * @value_of(x)
""", filename="traced.fxr")
TRACED_HELPERS = {"zero": lambda: torch.zeros(()), "value_of": lambda x: x.value}


def traced() -> torch.fx.GraphModule:
    torch.manual_seed(0)
    model = Traced().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    return torch.fx.symbolic_trace(model)


class Branches(torch.nn.Module):
    """``torch.cond`` branches and a ``torch.no_grad()`` region: three subgraphs, rewritten with the module."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cond(x.sum() > 0, lambda v: torch.abs(torch.abs(v)) + torch.relu(torch.relu(v)),
                       lambda v: torch.relu(torch.relu(v)) - 1, (x,))
        with torch.no_grad():
            z = torch.abs(torch.abs(y)) * 2
        return torch.relu(torch.relu(z)) + torch.abs(torch.abs(x))


NESTED_RULES = fxrules.parse("""
rule abs_twice:
    torch.ops.aten.abs.default(torch.ops.aten.abs.default(x)) => torch.ops.aten.abs.default(x)
rule relu_twice:
    torch.ops.aten.relu.default(torch.ops.aten.relu.default(x)) => torch.ops.aten.relu.default(x)
""", filename="nested.fxr")
BRANCH_INPUTS = (torch.randn(4), torch.rand(4), -torch.rand(4))


@functools.cache
def _branches_program() -> torch.export.ExportedProgram:
    return torch.export.export(Branches(), (torch.randn(4),))


def nested() -> torch.fx.GraphModule:
    with warnings.catch_warnings():  # copying pytree specs warns about torch's own LeafSpec
        warnings.simplefilter("ignore", FutureWarning)
        return copy.deepcopy(_branches_program().module())


def _traced_apply(gm: torch.fx.GraphModule) -> fxrules.Report:
    return fxrules.apply(gm, TRACED_RULES, helpers=TRACED_HELPERS)


def _nested_apply(gm: torch.fx.GraphModule) -> fxrules.Report:
    return fxrules.apply(gm, NESTED_RULES)


TRACED_FIRED = {"fold": 1, "neg_twice": 1, "add_zero_attribute": 1, "relu_twice": 1}
NESTED_FIRED = {"abs_twice": 3, "relu_twice": 3}


def test_the_models_rewrite_to_what_they_computed() -> None:
    """Without a failure, both models are rewritten (submodules and a buffer deleted, every subgraph changed)
    and compute what they did."""
    gm, x = traced(), torch.randn(2, 3, 6, 6)
    expected = gm(x)
    report = _traced_apply(gm)
    assert report.counts() == TRACED_FIRED
    assert report["skipped_halfway"].skip_counts == {"value unknown": 1}
    assert not hasattr(gm, "conv") and not hasattr(gm, "bn") and not hasattr(gm, "zero")
    torch.testing.assert_close(gm(x), expected)
    gm = nested()
    expected_outputs = [gm(x) for x in BRANCH_INPUTS]
    assert _nested_apply(gm).counts() == NESTED_FIRED
    for x, expected in zip(BRANCH_INPUTS, expected_outputs, strict=True):
        torch.testing.assert_close(gm(x), expected)


# ---------------------------------------------------------------- a failure at every step of the commit


class InjectedError(RuntimeError):
    """The failure a test injects."""


@dataclasses.dataclass(frozen=True)
class Step:
    """A step of the commit, as the torch.fx seam it goes through: ``owner.name``, the calls of it that are
    that step (``applies``), and how many of those to let pass before the failure."""

    model: str  # "traced", "nested" or "program"
    owner: Any
    name: str
    applies: Callable[..., bool] = lambda gm, original, this, *args: True
    skip: int = 0


def _in_original(gm: torch.fx.GraphModule, original: set[torch.fx.Node], graph: torch.fx.Graph,
                 node: torch.fx.Node) -> bool:
    return node in original  # the commit erasing a node of the graph as given (a rewrite undone erases new ones)


def _root(gm: torch.fx.GraphModule, original: set[torch.fx.Node], this: Any, *args: Any) -> bool:
    return this is gm or this is gm.graph


def _subgraph(gm: torch.fx.GraphModule, original: set[torch.fx.Node], this: Any, *args: Any) -> bool:
    return not _root(gm, original, this)


def _rewritten(gm: torch.fx.GraphModule, original: set[torch.fx.Node], this: torch.fx.GraphModule) -> bool:
    return any("fxrules" in node.meta for node in this.graph.nodes)


def _buffer(gm: torch.fx.GraphModule, original: set[torch.fx.Node], this: torch.nn.Module, name: str) -> bool:
    return name in this._buffers


STEPS = {
    "lint": Step("traced", lint, "lint"),
    "dead code, first erasure": Step("traced", transaction, "erase_node", _in_original),
    "dead code, a later erasure": Step("traced", transaction, "erase_node", _in_original, skip=2),
    "code generation": Step("traced", torch.fx.Graph, "python_code"),
    "recompile": Step("traced", torch.fx.GraphModule, "recompile"),
    "submodule deletion": Step("traced", torch.fx.GraphModule, "delete_submodule", skip=1),
    "buffer deletion": Step("traced", torch.nn.Module, "__delattr__", _buffer),
    "subgraph lint": Step("nested", lint, "lint", _subgraph, skip=1),
    "subgraph dead code": Step("nested", transaction, "erase_node", _subgraph, skip=1),
    "subgraph code generation": Step("nested", torch.fx.Graph, "python_code", _subgraph, skip=1),
    "subgraph recompile": Step("nested", torch.fx.GraphModule, "recompile", _subgraph, skip=1),
    "module lint after the subgraphs' commits": Step("nested", lint, "lint", _root),
    "module dead code after the subgraphs' commits": Step("nested", transaction, "erase_node", _root),
    "module recompile after the subgraphs' commits": Step("nested", torch.fx.GraphModule, "recompile", _root),
    "program: the rewrite's recompile": Step("program", torch.fx.GraphModule, "recompile", _rewritten),
    "program: rebuilding the ExportedProgram": Step("program", torch.export.ExportedProgram, "_update"),
}


def _inject(patch: pytest.MonkeyPatch, step: Step, gm: torch.nn.Module, failure: type[BaseException],
            after: bool) -> list[str]:
    """Make the step raise ``failure`` once, before or after doing its work; the list says whether it did."""
    original_call = getattr(step.owner, step.name)
    original_nodes = set(gm.graph.nodes) if isinstance(gm, torch.fx.GraphModule) else set()
    passed, raised = [0], []

    def patched(this: Any, *args: Any, **kwargs: Any) -> Any:
        if not raised and step.applies(gm, original_nodes, this, *args):
            if passed[0] == step.skip:
                if after:
                    original_call(this, *args, **kwargs)
                raised.append(step.name)
                raise failure("injected")
            passed[0] += 1
        return original_call(this, *args, **kwargs)

    patch.setattr(step.owner, step.name, patched)
    return raised


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _expect_failure(failure: type[BaseException], action: Callable[[], Any]) -> None:
    """``action`` raises the injected KeyboardInterrupt as it is, and an injected error as an FxrError."""
    expected = KeyboardInterrupt if failure is KeyboardInterrupt else fxrules.FxrError
    with pytest.raises(expected) as raised:
        action()
    assert _caused_by(raised.value, failure)


@pytest.mark.parametrize("after", [False, True], ids=["before its work", "after its work"])
@pytest.mark.parametrize("failure", [InjectedError, KeyboardInterrupt], ids=["RuntimeError", "KeyboardInterrupt"])
@pytest.mark.parametrize("step", STEPS.values(), ids=STEPS.keys())
def test_a_failure_at_any_step_of_the_commit_leaves_the_module_as_it_was(
        step: Step, failure: type[BaseException], after: bool) -> None:
    """The failure propagates (an error as an FxrError caused by it), every graph module is as it was, and
    once the failure is gone the same ``apply`` rewrites it into a module that computes what it did."""
    if step.model == "program":
        _check_program_step(step, failure, after)
        return
    gm = traced() if step.model == "traced" else nested()
    run, fired = (_traced_apply, TRACED_FIRED) if step.model == "traced" else (_nested_apply, NESTED_FIRED)
    inputs = [torch.randn(2, 3, 6, 6)] if step.model == "traced" else BRANCH_INPUTS
    expected = [gm(x) for x in inputs]
    before = snapshot(gm)
    with pytest.MonkeyPatch.context() as patch:
        raised = _inject(patch, step, gm, failure, after)
        _expect_failure(failure, lambda: run(gm))
    assert raised, "the step was never reached"
    assert_unchanged(before, gm)
    assert run(gm).counts() == fired
    for x, output in zip(inputs, expected, strict=True):
        torch.testing.assert_close(gm(x), output)


def _check_program_step(step: Step, failure: type[BaseException], after: bool) -> None:
    """An exported program is rewritten on a copy: whatever fails, the program given is unchanged."""
    program = _branches_program()
    before = snapshot(program.graph_module)
    state = {name: (value, value.clone()) for name, value in program.state_dict.items()}
    signature = str(program.graph_signature)
    with pytest.MonkeyPatch.context() as patch:
        raised = _inject(patch, step, program.graph_module, failure, after)
        _expect_failure(failure, lambda: fxrules.apply_program(program, NESTED_RULES))
    assert raised, "the step was never reached"
    assert_unchanged(before, program.graph_module)
    assert str(program.graph_signature) == signature
    assert {name: value for name, (value, _) in state.items()} == program.state_dict
    result = fxrules.apply_program(program, NESTED_RULES)
    assert result.report.counts() == NESTED_FIRED
    for x in BRANCH_INPUTS:
        torch.testing.assert_close(result.program.module()(x), program.module()(x))


# ---------------------------------------------------------------- a rule file alone makes code generation fail


def test_a_replacement_python_cannot_compile_is_an_error_naming_the_rule_and_changes_nothing() -> None:
    """``(1).neg()`` is generated as ``1.neg()``, which Python cannot compile: the commit fails after the
    dead code is erased, and ``apply`` raises an FxrApplyError naming the rule, the graph as it was."""
    rules = fxrules.parse("# a method of a literal\nrule bad:\n    torch.neg(torch.neg(x)) => x + (1).neg()\n",
                          filename="codegen.fxr")
    gm = torch.fx.symbolic_trace(lambda x: torch.neg(torch.neg(x)) * 2)
    before = snapshot(gm)
    with pytest.raises(fxrules.FxrApplyError) as raised:
        fxrules.apply(gm, rules)
    message = str(raised.value)
    assert message.startswith("codegen.fxr:2: rule bad made 'neg_2 = 1.neg()', the rewritten graph could not be "
                              "committed, so nothing was changed: SyntaxError: invalid decimal literal"), message
    assert_unchanged(before, gm)
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), x * 2)


# ---------------------------------------------------------------- an interrupt anywhere


_FRAMES = (str(Path(fxrules.__file__).parent), str(Path(torch.fx.__file__).parent))


def _counts(frame: FrameType, event: str) -> bool:
    """A call of a function of fxrules or torch.fx, not a generator resumed (or closed, where a raise is lost)."""
    return event == "call" and not frame.f_code.co_flags & inspect.CO_GENERATOR \
        and frame.f_code.co_filename.startswith(_FRAMES)


def _interrupt_at(index: int, action: Callable[[], Any]) -> bool:
    """Run ``action``, raising KeyboardInterrupt as the ``index``-th call of a function of fxrules or torch.fx
    starts (Python drops the profiler once it raised); whether it was interrupted."""
    count = 0

    def profile(frame: FrameType, event: str, _: Any) -> None:
        nonlocal count
        if _counts(frame, event):
            if count == index:
                raise KeyboardInterrupt
            count += 1

    sys.setprofile(profile)
    try:
        action()
    except KeyboardInterrupt:
        return True
    finally:
        sys.setprofile(None)
    return False


@functools.cache
def _calls(model: str) -> int:
    """How many calls of fxrules and torch.fx functions one ``apply`` of the model makes."""
    gm, run = (traced(), _traced_apply) if model == "traced" else (nested(), _nested_apply)
    run(gm)  # warm caches: the count is for later runs
    gm, count = (traced() if model == "traced" else nested()), [0]

    def profile(frame: FrameType, event: str, _: Any) -> None:
        if _counts(frame, event):
            count[0] += 1

    sys.setprofile(profile)
    try:
        run(gm)
    finally:
        sys.setprofile(None)
    return count[0]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["traced", "nested"]), data=st.data())
def test_an_interrupt_at_any_call_in_apply_leaves_the_module_as_it_was(model: str, data: st.DataObject) -> None:
    """A KeyboardInterrupt as any function of fxrules or torch.fx is entered during ``apply`` (of a module
    with subgraphs, helpers' submodules and buffers, several rewrites) propagates, and every graph module
    is as it was; a later ``apply`` rewrites it, and it computes what it did."""
    index = data.draw(st.integers(0, _calls(model) - 1), label="interrupted call")
    gm = traced() if model == "traced" else nested()
    run, fired = (_traced_apply, TRACED_FIRED) if model == "traced" else (_nested_apply, NESTED_FIRED)
    inputs = [torch.randn(2, 3, 6, 6)] if model == "traced" else BRANCH_INPUTS
    expected = [gm(x) for x in inputs]
    before = snapshot(gm)
    if _interrupt_at(index, lambda: run(gm)):
        assert_unchanged(before, gm)
        assert run(gm).counts() == fired
    for x, output in zip(inputs, expected, strict=True):
        torch.testing.assert_close(gm(x), output)


# ---------------------------------------------------------------- metadata from fake tensors only

CALLS: list[tuple[Any, ...]] = []


def counted(*args: Any) -> torch.Tensor:
    """A Python function a rule names through ``allow=``: it records every call."""
    CALLS.append(args)
    return torch.zeros(3)


@pytest.fixture
def calls() -> Iterator[list[tuple[Any, ...]]]:
    CALLS.clear()
    yield CALLS
    CALLS.clear()


def _double_neg(x: torch.Tensor) -> torch.Tensor:
    return torch.neg(torch.neg(x)) * 2


def test_a_new_tensor_operation_on_literals_gets_metadata_without_running() -> None:
    """``torch.rand(3)`` in a replacement: its metadata is inferred on fake tensors (shape, dtype), and the
    random number generator is not drawn from, as it would be if the operation ran."""
    gm = torch.fx.symbolic_trace(_double_neg)
    inputs = [torch.randn(2, 3)]
    state = torch.get_rng_state()
    rules = fxrules.parse("rule r:\n    torch.neg(torch.neg(x)) => torch.relu(x) + torch.rand(3)\n")
    assert fxrules.apply(gm, rules, example_inputs=inputs).counts() == {"r": 1}
    assert torch.equal(torch.get_rng_state(), state)
    (rand,) = gm.graph.find_nodes(op="call_function", target=torch.rand)
    assert (rand.meta["val"].shape, rand.meta["val"].dtype) == ((3,), torch.float32)
    (add,) = [n for n in gm.graph.nodes if n.target is operator.add]
    (x,) = gm.graph.find_nodes(op="placeholder")
    assert add.meta["val"].shape == x.meta["val"].shape  # the example's sizes as symbols


def test_a_new_node_in_a_graph_of_symbolic_sizes_gets_metadata() -> None:
    """An elementwise kernel asks whether a symbolic dim is 1 to choose strides; that question does not keep
    the new node from getting metadata, so a later rule that reads it fires."""
    rules = fxrules.parse("""
rule nested:
    torch.neg(torch.neg(x)) => torch.sigmoid(torch.relu(x))
rule reads_the_new_node:
    torch.sigmoid(y) => torch.tanh(y) where y.ndim == 2 and y.dtype == float32
""")
    gm = torch.fx.symbolic_trace(_double_neg)
    report = fxrules.apply(gm, rules, example_inputs=[torch.randn(2, 3)])
    assert report.counts() == {"nested": 1, "reads_the_new_node": 1}
    (relu,) = gm.graph.find_nodes(op="call_function", target=torch.relu)
    (x,) = gm.graph.find_nodes(op="placeholder")
    assert relu.meta["val"].shape == x.meta["val"].shape
    inputs = torch.randn(5, 4)
    torch.testing.assert_close(gm(inputs), torch.tanh(torch.relu(inputs)) * 2)


def test_an_aten_operator_on_literals_gets_fake_metadata_in_a_graph_of_fake_tensors() -> None:
    """In an exported graph (FakeTensors in ``val``), the new node's ``val`` is a FakeTensor of the graph's
    mode, made without drawing random numbers."""
    gm = _exported_double_neg()
    rules = fxrules.parse("rule r:\n    torch.ops.aten.neg.default(torch.ops.aten.neg.default(x)) => "
                          "torch.ops.aten.relu.default(x) + torch.ops.aten.rand.default([3])\n")
    state = torch.get_rng_state()
    assert fxrules.apply(gm, rules).counts() == {"r": 1}
    assert torch.equal(torch.get_rng_state(), state)
    (rand,) = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.rand.default)
    value = rand.meta["val"]
    placeholder = gm.graph.find_nodes(op="placeholder")[0].meta["val"]
    assert isinstance(value, FakeTensor) and value.fake_mode is placeholder.fake_mode
    assert (value.shape, value.dtype) == ((3,), torch.float32)


def _exported_double_neg() -> torch.fx.GraphModule:
    class DoubleNeg(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _double_neg(x)

    return torch.export.export(DoubleNeg(), (torch.randn(2, 3),)).module()


@pytest.mark.parametrize("replacement", ["x + t.counted(3)", "x + t.counted(x)"], ids=["literals", "a tensor"])
def test_a_python_function_a_rule_names_is_never_run_to_infer_metadata(
        replacement: str, calls: list[tuple[Any, ...]]) -> None:
    """A function allowed with ``allow=`` is not a tensor operation: ``apply`` does not call it (on literals,
    nor on stand-ins for tensors), and its node gets no metadata; the module calls it when it runs."""
    rules = fxrules.parse(f"use {__name__} as t\nrule r:\n    torch.neg(torch.neg(x)) => {replacement}\n",
                          allow=[__name__])
    gm = torch.fx.symbolic_trace(_double_neg)
    assert fxrules.apply(gm, rules, example_inputs=[torch.randn(2, 3)], allow=[__name__]).counts() == {"r": 1}
    assert calls == []
    (node,) = gm.graph.find_nodes(op="call_function", target=counted)
    assert not {"val", "tensor_meta"} & set(node.meta)
    x = torch.randn(2, 3)
    torch.testing.assert_close(gm(x), x * 2)
    assert len(calls) == 1


# ---------------------------------------------------------------- a helper cannot change what it is given


class Scaled(torch.nn.Module):
    """A Linear, a ReLU after it, and a buffer the result is scaled by."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * self.scale


HELPER_RULES = fxrules.parse("""
rule linear_relu:
    given:
        lin: nn.Linear
    pattern:
        return torch.relu(lin(x))
    replace:
        return @fused(lin)(x)

rule scaled:
    given:
        s: Attr
    pattern:
        return x * s
    replace:
        return x * @factor(s)
""", filename="helpers.fxr")


def _write_weight_then_raise(lin: torch.nn.Linear) -> torch.nn.Module:
    with torch.no_grad():
        lin.weight.mul_(2)
    raise ValueError("gave up")


def _add_attribute_then_raise(lin: torch.nn.Linear) -> torch.nn.Module:
    lin.weight = torch.nn.Parameter(torch.zeros(3, 3))
    lin.extra = torch.nn.ReLU()
    raise ValueError("gave up")


def _replace_weight(lin: torch.nn.Linear) -> torch.nn.Module:
    lin.weight = torch.nn.Parameter(torch.zeros(3, 3))
    return torch.nn.Sequential(lin, torch.nn.ReLU())


def _write_buffer(s: torch.Tensor) -> float:
    s.add_(1)
    return 2.0


@pytest.mark.parametrize(("helpers", "error"), [
    ({"fused": _write_weight_then_raise, "factor": lambda s: 1.0},
     "helpers.fxr:2:6: rule linear_relu failed at node 'relu': ArgumentWriteError: helper '@fused' tried to write in "
     "place into Linear.weight (aten.mul_.Tensor); a helper must return new values, not change its arguments"),
    ({"fused": _add_attribute_then_raise, "factor": lambda s: 1.0},
     "helpers.fxr:2:6: rule linear_relu failed at node 'relu': ValueError: gave up"),
    ({"fused": _replace_weight, "factor": lambda s: 1.0},
     "helpers.fxr:2:6: rule linear_relu failed at node 'relu': ArgumentWriteError: helper '@fused' changed the "
     "attributes of a Linear it was given (put back); a helper must return new values, not change its arguments"),
    ({"fused": lambda lin: torch.nn.Sequential(lin, torch.nn.ReLU()), "factor": _write_buffer},
     "helpers.fxr:10:6: rule scaled failed at node 'mul': ArgumentWriteError: helper '@factor' tried to write in "
     "place into a tensor (aten.add_.Tensor); a helper must return new values, not change its arguments"),
], ids=["writes a parameter, then raises", "replaces a parameter, then raises", "replaces a parameter",
        "writes a buffer"])
def test_a_helper_that_changes_its_arguments_leaves_the_module_as_it_was(
        helpers: dict[str, Callable[..., Any]], error: str) -> None:
    """A helper is given the real captured modules and tensors; a write into them is refused before it
    happens, and a changed attribute is put back, so ``apply`` fails with the module exactly as it was."""
    gm = torch.fx.symbolic_trace(Scaled())
    x = torch.randn(2, 3)
    expected = gm(x)
    before = snapshot(gm)
    with pytest.raises(fxrules.FxrApplyError) as raised:
        fxrules.apply(gm, HELPER_RULES, helpers=helpers)
    assert str(raised.value).startswith(error), str(raised.value)
    assert_unchanged(before, gm)
    assert not hasattr(gm.lin, "extra")
    torch.testing.assert_close(gm(x), expected)
