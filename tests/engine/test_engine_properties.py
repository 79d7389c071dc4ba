"""Properties of ``apply`` with sound, shrinking rules on random FX graphs.

After ``apply``: the graph lints, no dead node remains, the outputs are the
original's on random inputs, a second ``apply`` fires nothing, and the graph
did not grow.  When nothing fired, the module is untouched.  With
``example_inputs``, shape metadata stays true and new nodes record their rule.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.fx.passes.shape_prop import ShapeProp

import fxrules
from fxrules.engine.scheduler import VisitEverything
from tests.conftest import apply_outcome, slow_examples
from tests.strategies import GeneratedGraph, graphs, inputs

#: Sound rules that never add nodes, written with families, exact targets, modules, DAGs and two outputs.
EXTRA_RULES = """
rule neg_times_neg:
    \"\"\"(-a) * (-b) is a * b (exactly, in IEEE arithmetic).\"\"\"
    mul(neg(a), neg(b)) => a * b

rule neg_squared:
    \"\"\"n * n with n = -x is x * x: `n` is a shared interior node (used twice).\"\"\"
    pattern:
        n = neg(x)
        return mul(n, n)
    replace:
        return x * x

rule shared_neg:
    \"\"\"Two negations of one value are one.\"\"\"
    pattern:
        return neg(x), neg(x)
    replace:
        n = neg(x)
        return n, n

rule relu_after_relu_module:
    given:
        m: nn.ReLU
    pattern:
        return torch.relu(m(x))
    where:
        not m.inplace
    replace:
        return m(x)

rule sum_keepdim_twice:
    \"\"\"Summing a kept size-1 dim again changes nothing.\"\"\"
    sum(sum(x, d, keepdim=True), d, keepdim=True) => sum(x, d, keepdim=True)

rule transpose_method_twice:
    x.transpose(a, b).transpose(a, b) => x
"""

RULES = fxrules.parse(EXTRA_RULES, filename="test_engine_properties.py") + fxrules.load("algebra.fxr")

SLOW_EXAMPLES = slow_examples(300)
FAST_EXAMPLES = 40
COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


def _outputs(gm: torch.fx.GraphModule, args: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    result = gm(*[a.clone() for a in args])
    return tuple(result) if isinstance(result, tuple | list) else (result,)


def check_apply_properties(graph: GeneratedGraph, data: st.DataObject) -> None:
    gm = graph.gm
    original = copy.deepcopy(gm)
    code_before, nodes_before = gm.code, len(gm.graph.nodes)
    report = fxrules.apply(gm, RULES)

    gm.graph.lint()
    dead = [n.name for n in gm.graph.nodes if n.op not in ("placeholder", "output") and not n.users]
    assert not dead, f"dead nodes left: {dead}\n{gm.code}"
    assert len(gm.graph.nodes) <= nodes_before, f"the graph grew:\n{code_before}\n->\n{gm.code}"
    if not report.counts():
        assert gm.code == code_before, "nothing fired, yet the module changed"
    args = data.draw(inputs(graph.n_inputs), label="inputs")
    expected = _outputs(original, args)
    actual = _outputs(gm, args)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, equal_nan=True)
    again = fxrules.apply(gm, RULES)
    assert again.counts() == {}, f"not a fixpoint: {again.counts()} still fire on\n{gm.code}"


@settings(max_examples=FAST_EXAMPLES, **COMMON)
@given(graph=graphs(), data=st.data())
def test_apply_properties(graph: GeneratedGraph, data: st.DataObject) -> None:
    check_apply_properties(graph, data)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **COMMON)
@given(graph=graphs(max_steps=16), data=st.data())
def test_apply_properties_many_examples(graph: GeneratedGraph, data: st.DataObject) -> None:
    check_apply_properties(graph, data)


@settings(max_examples=FAST_EXAMPLES, **COMMON)
@given(graph=graphs(), data=st.data())
def test_new_nodes_carry_right_metadata_and_provenance(graph: GeneratedGraph, data: st.DataObject) -> None:
    """With ``example_inputs``, shape metadata matches a fresh ShapeProp run and every new node names its rule."""
    gm = graph.gm
    names_before = {n.name for n in gm.graph.nodes}
    args = data.draw(inputs(graph.n_inputs, special=False), label="inputs")
    report = fxrules.apply(gm, RULES, example_inputs=args)
    fresh = copy.deepcopy(gm)
    ShapeProp(fresh).propagate(*args)
    for node, truth in zip(gm.graph.nodes, fresh.graph.nodes, strict=True):
        if node.op in ("output", "get_attr"):
            continue
        if node.op != "call_module" or "val" in node.meta:
            meta = node.meta.get("val")
            assert meta is not None, f"'{node.name}' has no shape metadata\n{gm.code}"
            expected = truth.meta["tensor_meta"]
            shape = [size.node.hint if isinstance(size, torch.SymInt) else size for size in meta.shape]
            assert (shape, meta.dtype) == (list(expected.shape), expected.dtype), node.name
        if node.name not in names_before and node.op != "placeholder":
            origin = node.meta.get("fxrules", {})
            assert origin.get("rule") in report.counts(), f"new node '{node.name}' has no provenance: {origin}"


@settings(max_examples=FAST_EXAMPLES, **COMMON)
@given(graph=graphs())
def test_untouched_unless_something_fires(graph: GeneratedGraph) -> None:
    """With rules that match nothing in these graphs, ``apply`` changes nothing at all."""
    gm = graph.gm
    code, modules = gm.code, dict(gm.named_modules())
    report = fxrules.apply(gm, "fusions.fxr")
    assert report.counts() == {}
    assert gm.code == code
    assert dict(gm.named_modules()) == modules


@settings(max_examples=FAST_EXAMPLES, **COMMON)
@given(graph=graphs())
def test_the_incremental_scheduler_finds_what_visiting_everything_finds(graph: GeneratedGraph) -> None:
    """With rules of two outputs, modules and DAGs (nothing settles then), the default scheduler gives the
    code, passes, rewrites and skips of one that visits every anchor node in every pass."""
    everything = copy.deepcopy(graph.gm)
    report = fxrules.apply(graph.gm, RULES)
    report_all = fxrules.apply(everything, RULES, scheduler=VisitEverything)
    assert apply_outcome(graph.gm, report) == apply_outcome(everything, report_all)
