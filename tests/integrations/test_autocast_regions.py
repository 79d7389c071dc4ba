"""Rewrites inside ``torch.autocast`` regions: a rewrite that would change a dtype there is skipped with reason
``autocast``, one that keeps every dtype still fires, and the program computes what it computes eagerly.

The regions come from Dynamo (``_enter_autocast`` / ``_exit_autocast`` calls), ``torch.export``
(``wrap_with_autocast`` subgraphs) and hand-written symbolic graphs with the same calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.fx.passes.shape_prop import ShapeProp

import fxrules
from fxrules.integrations.pipelines import Backend, RulesArgument

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

ADDMM_DETAIL = "'add' is torch.float32 in autocast(cpu, torch.bfloat16), and its replacement would be torch.bfloat16"

#: matmul * 1 => matmul keeps the product's dtype (bfloat16 either way); relu(matmul(a, b)) => relu(a) drops the
#: matmul autocast casts, so the result would be float32; add_mm adds one, whose bfloat16 result the float32
#: addend makes float32 again (the last two are written only to remove or add a listed operation).
RULES = fxrules.parse('''
rule times_one:
    torch.matmul(a, b) * 1 => torch.matmul(a, b)

rule drop_matmul:
    torch.relu(torch.matmul(a, b)) => torch.relu(a)

rule add_mm:
    torch.relu(x) + c => torch.relu(torch.mm(x, x)) + c
''')


def _skips(report: fxrules.Report) -> dict[str, list[tuple[str, str]]]:
    """Rule name -> (reason, detail) of its kept skipped matches."""
    return {rule.name: [(str(s.reason), s.detail) for s in rule.skipped] for rule in report.rules if rule.skipped}


def _compiled(fn: Callable[..., torch.Tensor], rules: RulesArgument) -> tuple[Callable[..., torch.Tensor], Backend]:
    backend = fxrules.backend(rules, then="eager")
    return torch.compile(fn, backend=backend), backend


def _fusable(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.matmul(a, w) + b


def _double_neg(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.matmul(torch.neg(torch.neg(x)), w)


INPUTS = (torch.randn(4, 4), torch.randn(4, 4), torch.randn(4))


def test_dynamo_region_refuses_a_fusion_that_changes_the_dtype() -> None:
    """matmul + bias is float32 under autocast; addmm would be bfloat16: skipped, and the output is eager's."""
    compiled, backend = _compiled(_fusable, "fusions.fxr")
    result = compiled(*INPUTS)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result, _fusable(*INPUTS), rtol=0, atol=0)
    assert _skips(backend.reports[0]) == {"addmm": [("autocast", ADDMM_DETAIL)]}


def test_dynamo_region_still_fires_a_rewrite_that_keeps_dtypes() -> None:
    """neg(neg(x)) => x inside the region: neg is on no autocast list, the matmul after it sees x either way."""
    compiled, backend = _compiled(_double_neg, "algebra.fxr")
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    result = compiled(x, w)
    assert backend.reports[0].counts() == {"double_neg": 1}
    assert result.dtype == torch.bfloat16
    torch.testing.assert_close(result, _double_neg(x, w), rtol=0, atol=0)


def test_dynamo_region_keeps_a_listed_operation_whose_dtype_stays() -> None:
    """matmul(a, b) * 1 => matmul(a, b) makes a new matmul: bfloat16 under autocast, as the product was."""
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.matmul(a, b) * 1

    compiled, backend = _compiled(fn, RULES)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    result = compiled(a, b)
    assert backend.reports[0].counts() == {"times_one": 1}
    assert result.dtype == torch.bfloat16
    torch.testing.assert_close(result, fn(a, b), rtol=0, atol=0)


def test_a_new_interior_node_in_the_region_gets_the_dtype_autocast_gives_it() -> None:
    """The new matmul inside relu(matmul(a, b)) replaces no output: its metadata is computed, under autocast
    (bfloat16, as it runs), so later rules and checks read the dtype it has."""
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.relu(torch.matmul(a, b)) * 1

    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    rules = fxrules.parse("rule relu_times_one:\n    torch.relu(torch.matmul(a, b)) * 1 => "
                          "torch.relu(torch.matmul(a, b))\n")
    backend = fxrules.backend(rules, then=keep)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    torch.testing.assert_close(torch.compile(fn, backend=backend)(a, b), fn(a, b), rtol=0, atol=0)
    assert backend.reports[0].counts() == {"relu_times_one": 1}
    [matmul] = [n for n in graphs[0].graph.nodes if n.target is torch.matmul]
    assert "fxrules" in matmul.meta and matmul.meta["val"].dtype == torch.bfloat16


def test_dynamo_region_refuses_removing_an_operation_autocast_casts() -> None:
    """relu(matmul(a, b)) is bfloat16 under autocast; relu(a) would be float32."""
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.relu(torch.matmul(a, b))

    compiled, backend = _compiled(fn, RULES)
    assert compiled(torch.randn(4, 4), torch.randn(4, 4)).dtype == torch.bfloat16
    assert _skips(backend.reports[0]) == {"drop_matmul": [(
        "autocast",
        "'relu' is torch.bfloat16 in autocast(cpu, torch.bfloat16), and its replacement would be torch.float32")]}


def test_dynamo_region_refuses_a_new_operation_autocast_casts_though_the_output_dtype_stays() -> None:
    """relu(x) + c and relu(mm(x, x)) + c are both float32, but the new mm would compute in bfloat16 where no
    operation of the match did."""
    def fn(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.relu(x) + c

    compiled, backend = _compiled(fn, RULES)
    x, c = torch.randn(4, 4), torch.randn(4, 4)
    torch.testing.assert_close(compiled(x, c), fn(x, c), rtol=0, atol=0)
    assert _skips(backend.reports[0]) == {"add_mm": [(
        "autocast", "autocast would run the replacement's 'mm' in torch.bfloat16 (it would be torch.float32 without "
                    "autocast), and no node of the match with its target is torch.bfloat16")]}


def test_a_match_spanning_the_region_boundary_is_refused() -> None:
    """The replacement would run where its output is, not where the first neg was."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.neg(x)
        return torch.neg(y)

    compiled, backend = _compiled(fn, "algebra.fxr")
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)
    assert _skips(backend.reports[0]) == {"double_neg": [(
        "autocast",
        "'y' is computed in autocast(cpu, torch.bfloat16) and the replacement would be computed outside autocast")]}


def test_a_disabled_region_inside_autocast_lets_a_fusion_fire() -> None:
    """``torch.autocast(enabled=False)`` inside the region: nothing is cast there, and addmm fires."""
    def fn(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.autocast("cpu", enabled=False):
            return torch.matmul(a, w) + b

    compiled, backend = _compiled(fn, "fusions.fxr")
    result = compiled(*INPUTS)
    assert backend.reports[0].counts() == {"addmm": 1}
    assert result.dtype == torch.float32
    torch.testing.assert_close(result, fn(*INPUTS))


class _Fusable(torch.nn.Module):
    def forward(self, a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _fusable(a, w, b)


def test_exported_region_refuses_a_fusion_that_changes_the_dtype() -> None:
    """The subgraph of ``wrap_with_autocast`` runs in its region: addmm is skipped there, with the same detail."""
    result = fxrules.apply_program(torch.export.export(_Fusable(), INPUTS), "fusions.fxr")
    output = result.program.module()(*INPUTS)
    assert output.dtype == torch.float32
    torch.testing.assert_close(output, _fusable(*INPUTS), rtol=0, atol=0)
    assert _skips(result.report) == {"addmm": [("autocast", ADDMM_DETAIL)]}


def _in_symbolic_region(fn: Callable[..., torch.Tensor]) -> torch.fx.GraphModule:
    """``fn`` traced, its matmul to its output between hand-written ``_enter_autocast`` and ``_exit_autocast``
    calls."""
    gm = torch.fx.symbolic_trace(fn)
    graph = gm.graph
    with graph.inserting_before(next(iter(graph.find_nodes(op="call_function", target=torch.matmul)))):
        enter = graph.call_function(torch.amp.autocast_mode._enter_autocast, ("cpu", torch.bfloat16, True, None))
    with graph.inserting_before(graph.output_node()):
        graph.call_function(torch.amp.autocast_mode._exit_autocast, (enter,))
    gm.recompile()
    return gm


def test_symbolic_region_with_shape_metadata_refuses_the_fusion() -> None:
    """ShapeProp runs the region (its metadata says bfloat16 for the product); the fusion is refused."""
    gm = _in_symbolic_region(lambda a, w, b: torch.matmul(a, w) + b)
    ShapeProp(gm).propagate(*INPUTS)
    report = fxrules.apply(gm, "fusions.fxr")
    assert _skips(report) == {"addmm": [("autocast", ADDMM_DETAIL)]}
    assert gm(*INPUTS).dtype == torch.float32


def test_symbolic_region_without_metadata_refuses_every_rewrite_it_cannot_check() -> None:
    """Without metadata the dtypes under autocast are unknown: matmul * 1 is kept, and the skip says why."""
    gm = _in_symbolic_region(lambda a, b: torch.matmul(a, b) * 1)
    report = fxrules.apply(gm, RULES)
    assert report.counts() == {}
    assert _skips(report) == {"times_one": [(
        "autocast", "the dtypes in autocast(cpu, torch.bfloat16) are unknown: node 'a' has no shape metadata")]}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the region can be run where CUDA is available")
def test_a_cuda_region_of_cuda_tensors_on_a_machine_without_cuda_refuses_what_it_cannot_check() -> None:
    """A graph of CUDA tensors (its metadata fake CUDA tensors) rewritten where torch cannot run CUDA autocast:
    torch would run the region without autocast, so the dtypes it gives on a GPU are unknown, and the fusion
    (a float16 addmm on a GPU) is refused, not accepted as float32."""
    gm = _in_symbolic_region(lambda a, w, b: torch.matmul(a, w) + b)
    enter = gm.graph.find_nodes(op="call_function", target=torch.amp.autocast_mode._enter_autocast)[0]
    enter.args = ("cuda", torch.float16, True, None)
    gm.recompile()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode, pytest.warns(UserWarning, match="Disabling autocast"):
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*(torch.empty(t.shape, device="cuda") for t in INPUTS))
    report = fxrules.apply(gm, "fusions.fxr")
    assert report.counts() == {}
    assert _skips(report) == {"addmm": [("autocast", "the dtypes in autocast(cuda, torch.float16) are unknown: torch "
                                                     "cannot run autocast(cuda, torch.float16) on this machine")]}


def _fuse_in_cond(p: torch.Tensor, a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    def branch(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, w) + b

    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.cond(p, branch, branch, (a, w, b))


class _FuseInCond(torch.nn.Module):
    def forward(self, p: torch.Tensor, a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _fuse_in_cond(p, a, w, b)


def test_branches_of_a_cond_called_in_the_region_run_in_it() -> None:
    """Both branches of ``torch.cond`` inside the region keep matmul + bias, in Dynamo and in export (which keeps
    the region as enter and exit calls around the cond)."""
    inputs = (torch.tensor(True), *INPUTS)
    compiled, backend = _compiled(_fuse_in_cond, "fusions.fxr")
    assert compiled(*inputs).dtype == torch.float32
    assert _skips(backend.reports[0]) == {"addmm": [("autocast", ADDMM_DETAIL)] * 2}
    result = fxrules.apply_program(torch.export.export(_FuseInCond(), inputs), "fusions.fxr")
    output = result.program.module()(*inputs)
    torch.testing.assert_close(output, _fuse_in_cond(*inputs), rtol=0, atol=0)
    assert _skips(result.report) == {"addmm": [("autocast", ADDMM_DETAIL)] * 2}


def test_a_graph_compiled_inside_autocast_runs_in_it() -> None:
    """Called inside ``torch.autocast``, Dynamo's graph has no region of its own but runs in the caller's (and is
    guarded on it): the fusion is refused there, and fires in the graph compiled for a call outside it."""
    def fn(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, w) + b

    compiled, backend = _compiled(fn, "fusions.fxr")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        result = compiled(*INPUTS)
        torch.testing.assert_close(result, fn(*INPUTS), rtol=0, atol=0)
    assert result.dtype == torch.float32
    assert _skips(backend.reports[0]) == {"addmm": [("autocast", ADDMM_DETAIL)]}
    compiled(*INPUTS)
    assert [report.counts() for report in backend.reports] == [{}, {"addmm": 1}]


def test_a_region_torch_would_refuse_refuses_every_rewrite_in_it() -> None:
    """An ``_enter_autocast`` call with arguments ``torch.autocast`` does not take cannot be entered: nothing in
    its region is known, so double_neg there is skipped, and apply neither fails nor changes the graph."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    enter = graph.call_function(torch.amp.autocast_mode._enter_autocast, ("cpu", torch.bfloat16, True, None, 5))
    out = graph.call_function(torch.neg, (graph.call_function(torch.neg, (x,)),))
    graph.call_function(torch.amp.autocast_mode._exit_autocast, (enter,))
    graph.output(out)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    code = gm.code
    report = fxrules.apply(gm, "algebra.fxr")
    [(reason, detail)] = _skips(report)["double_neg"]
    assert reason == "autocast" and detail.startswith("the dtypes in autocast(('cpu', torch.bfloat16, True, None, 5)")
    assert gm.code == code
