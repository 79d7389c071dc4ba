"""Review of the compile pipelines and of ``apply`` at scale: grad-mode regions, Inductor subgraphs, big graphs.

Tests marked ``xfail(strict=True)`` pin a behaviour that disagrees with the documentation; when it is
fixed (or the documentation changes) the mark must go.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import torch
import torch._dynamo
import torch._inductor.config
import torch.fx
from torch.utils.checkpoint import checkpoint

import fxrules
from fxrules.engine.report import KEEP_EXAMPLES, KEEP_MISSES
from fxrules.match import safety
from tests.integrations.pipeline_helpers import WithLinear, assert_inductor_computes_as_eager

nn = torch.nn


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _gradients(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
               params: list[nn.Parameter]) -> list[torch.Tensor]:
    """The output, and the gradients of its sum with respect to ``x`` and ``params``."""
    out = fn(x)
    return [out.detach(), *torch.autograd.grad(out.sum(), [x, *params])]


def _assert_same_gradients(compiled: Callable[[torch.Tensor], torch.Tensor], fn: Callable[[torch.Tensor], torch.Tensor],
                           x: torch.Tensor, params: list[nn.Parameter]) -> None:
    """``compiled`` (run first) gives ``fn``'s output and gradients with respect to ``x`` and ``params``."""
    for got, expected in zip(_gradients(compiled, x, params), _gradients(fn, x, params), strict=True):
        torch.testing.assert_close(got, expected)


def _skips(report: fxrules.Report) -> dict[str, list[str]]:
    """Rule name -> the reasons of its kept skipped matches."""
    return {rule.name: [s.reason for s in rule.skipped] for rule in report.rules if rule.skipped}


# ---------------------------------------------------------------- grad-mode regions


def _no_grad_region(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        y = torch.neg(x)
    return torch.neg(y) * x  # neg(neg(x)) spans the region: x's gradient flows once, not twice


def _inference_region(x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        y = torch.neg(x)
    return torch.neg(y) * x


def _identity_inside_no_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        z = torch.neg(torch.neg(x))  # z does not require grad; x, which would replace it, does
    return z * x


@pytest.mark.parametrize("fn", [_no_grad_region, _inference_region, _identity_inside_no_grad],
                         ids=["across-no-grad", "across-inference-mode", "identity-inside-no-grad"])
@pytest.mark.parametrize("then", ["eager", "aot_eager"])
def test_backend_gradients_do_not_flow_through_a_rewritten_no_grad_region(fn: Any, then: str) -> None:
    """Dynamo keeps ``torch.no_grad()`` as ``_set_grad_enabled`` calls in the graph; a match across such a
    boundary (or an identity that returns a value that requires grad for one computed without) changed
    which tensors require grad, so the compiled model's gradients were doubled."""
    backend = fxrules.backend("algebra.fxr", then=then)
    x = torch.randn(5, requires_grad=True)
    _assert_same_gradients(torch.compile(fn, backend=backend), fn, x, [])
    (report,) = backend.reports
    assert report.counts() == {}
    assert _skips(report) == {"double_neg": ["grad mode"]}


def test_rewrites_within_one_grad_mode_still_fire() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = torch.relu(torch.relu(x))  # within the region, replaced by a new node of the region
        return y * torch.neg(torch.neg(x))  # after it

    backend = fxrules.backend("algebra.fxr", then="eager")
    x = torch.randn(5, requires_grad=True)
    _assert_same_gradients(torch.compile(fn, backend=backend), fn, x, [])
    assert backend.reports[0].counts() == {"relu_idempotent": 1, "double_neg": 1}


class _NoGradIdentity(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = torch.neg(torch.neg(x))
        return y * x


def test_an_exported_no_grad_subgraph_does_not_come_to_return_its_input() -> None:
    """``wrap_with_set_grad_enabled(False, ...)`` runs its subgraph without grad; returning its input x
    there made the region's output require grad."""
    x = torch.randn(3, requires_grad=True)
    program = torch.export.export(_NoGradIdentity(), (x,))
    result = fxrules.apply_program(program, "algebra.fxr")
    assert result.report.counts() == {}
    assert _skips(result.report) == {"double_neg": ["grad mode"]}
    before, after = program.module()(x), result.program.module()(x)
    torch.testing.assert_close(torch.autograd.grad(after.sum(), x)[0], torch.autograd.grad(before.sum(), x)[0])


# ---------------------------------------------------------------- training through the pipelines


class _Checkpointed(WithLinear):
    def block(self, y: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(torch.relu(torch.relu(y)))) * 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, self.linear(x), use_reentrant=False)


def test_backend_rewrites_inside_a_checkpointed_region_and_gradients_match() -> None:
    torch.manual_seed(0)
    model = _Checkpointed()
    backend = fxrules.backend("algebra.fxr", then="aot_eager")
    x = torch.randn(4, 8, requires_grad=True)
    params = list(model.parameters())
    _assert_same_gradients(torch.compile(model, backend=backend), model, x, params)
    assert backend.reports[0].counts() == {"double_neg": 1, "relu_idempotent": 1, "mul_one": 1}


def test_post_grad_pass_in_training_rewrites_forward_and_backward_graphs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    graph_pass = fxrules.inductor_pass("algebra.fxr")

    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(model(x))) * 1

    x = torch.randn(4, 8, requires_grad=True)
    params = list(model.parameters())
    with torch._inductor.config.patch(post_grad_custom_post_pass=graph_pass, fx_graph_cache=False):
        _assert_same_gradients(torch.compile(forward), forward, x, params)
    assert len(graph_pass.reports) == 2  # the forward graph and the backward graph
    assert graph_pass.reports[0].counts() == {"double_neg": 1, "mul_one": 1}


# ---------------------------------------------------------------- Inductor: subgraphs of torch.cond


SILU = fxrules.parse("rule silu:\n    mul(x, sigmoid(x)) => F.silu(x)\n", "silu.fxr")


def _cond(x: torch.Tensor) -> torch.Tensor:
    def gated(x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) + 1

    def shifted(x: torch.Tensor) -> torch.Tensor:
        return x - 1

    return torch.cond(x.sum() > 0, gated, shifted, (x,))


def test_post_grad_pass_keeps_decomposed_operators_out_of_cond_branches() -> None:
    """Inductor runs the pass on each branch, then on the graph, whose ``apply`` rewrites the branches
    again: they were not marked as decomposed there, so ``aten.silu`` came back and Inductor failed
    ('both a fallback and a decomp for same op: aten.silu.default')."""
    graph_pass = fxrules.inductor_pass(SILU)
    assert_inductor_computes_as_eager(_cond, torch.ones(8), post_grad_custom_post_pass=graph_pass)
    assert all(report.counts() == {} for report in graph_pass.reports)
    assert any(_skips(report) == {"silu": ["decomposed operator"]} for report in graph_pass.reports)


# ---------------------------------------------------------------- dynamic shapes


def test_a_shape_guard_on_a_dynamic_dim_specializes_the_compiled_graph() -> None:
    """A typed capture ``Tensor[5, K]`` compared with a symbolic batch: skipped as ``dynamic size`` unless
    ``static_shapes=True``; then Dynamo must guard on it, so a batch of 7 recompiles rather than reusing the
    graph rewritten for 5 rows."""
    rules = fxrules.parse("""
rule five_rows:
    given:
        x: Tensor[5, K]
    pattern:
        return torch.relu(x)
    replace:
        return torch.neg(x)
""", "rows.fxr")  # deliberately unsound: it shows which graph ran
    five, seven = torch.randn(5, 3), torch.randn(7, 3)
    backend = fxrules.backend(rules, then="eager")  # a graph compiled for dynamic shapes keeps them
    compiled = torch.compile(torch.relu, backend=backend, dynamic=True)
    torch.testing.assert_close(compiled(five), torch.relu(five))
    torch.testing.assert_close(compiled(seven), torch.relu(seven))
    assert [dict(report["five_rows"].skip_counts) for report in backend.reports] == [{"dynamic size": 1}]
    torch._dynamo.reset()
    backend = fxrules.backend(rules, then="eager", static_shapes=True)  # specializing: Dynamo guards the size
    compiled = torch.compile(torch.relu, backend=backend, dynamic=True)
    torch.testing.assert_close(compiled(five), torch.neg(five))
    torch.testing.assert_close(compiled(seven), torch.relu(seven))
    assert [report.counts() for report in backend.reports] == [{"five_rows": 1}, {}]


# ---------------------------------------------------------------- scale: wide graphs and reports


def _shared_relu(users: int) -> torch.fx.GraphModule:
    """relu(x) used by ``users`` relus: each relu(relu(x)) match is skipped, its inner node escaping."""
    graph = torch.fx.Graph()
    shared = graph.call_function(torch.relu, (graph.placeholder("x"),))
    graph.output(tuple(graph.call_function(torch.relu, (shared,)) for _ in range(users)))
    return torch.fx.GraphModule(nn.Module(), graph)


def test_an_escaping_user_detail_names_a_few_users_however_many_there_are() -> None:
    """The detail named every escaping user: one report line of 100 kB for a node with 10k users."""
    report = fxrules.apply(_shared_relu(300), "algebra.fxr")
    assert report["relu_idempotent"].skip_counts == {"escaping user": 300}
    detail = report["relu_idempotent"].skipped[0].detail
    assert detail == "'relu' is also used by relu_2, relu_3, relu_4, relu_5, relu_6 and 294 more outside the match"
    assert max(len(line) for line in str(report).splitlines()) < 300
    json.dumps(report.to_dict())


def test_explain_writes_the_details_of_the_near_misses_it_keeps_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``explain=True`` every skipped match's detail was written for a near miss the report then
    dropped: quadratic in the users of a shared node (10k users: 8 s instead of 1 s)."""
    written = 0
    escaping_detail = safety.escaping_detail

    def counted(node: torch.fx.Node, matched: set[torch.fx.Node], retired: Mapping[torch.fx.Node, None]) -> str:
        nonlocal written
        written += 1
        return escaping_detail(node, matched, retired)

    monkeypatch.setattr(safety, "escaping_detail", counted)
    report = fxrules.apply(_shared_relu(500), "algebra.fxr", explain=True)
    rule = report["relu_idempotent"]
    assert rule.skip_counts == {"escaping user": 500}
    assert len(rule.near_misses) == KEEP_MISSES
    assert written <= KEEP_EXAMPLES + KEEP_MISSES


def test_a_deep_chain_with_explain_has_no_recursion_limit() -> None:
    graph = torch.fx.Graph()
    value = graph.placeholder("x")
    for _ in range(5000):
        value = graph.call_function(torch.relu, (value,))
    graph.output(value)
    gm = torch.fx.GraphModule(nn.Module(), graph)
    report = fxrules.apply(gm, "algebra.fxr", explain=True)
    assert report.counts() == {"relu_idempotent": 4999}
    assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_function", "output"]
    assert report["relu_idempotent"].fired == len(report["relu_idempotent"].anchors)
    json.dumps(report.to_dict())


# ---------------------------------------------------------------- max_passes


def test_max_passes_counts_the_passes_that_rewrite() -> None:
    """docs/language.md: 'If rules still fire after max_passes passes, apply raises': relu(relu(x)) reaches
    its fixpoint in one pass that rewrites (and one that finds nothing), so max_passes=1 is enough; three
    nested relus need two passes that rewrite (used to raise at max_passes=N when pass N fired)."""
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(torch.relu(x)))
    report = fxrules.apply(gm, "algebra.fxr", max_passes=1)
    assert report.counts() == {"relu_idempotent": 1} and report.passes == 2
    rules = fxrules.parse("rule relu_twice:\n    torch.relu(torch.relu(x)) => torch.relu(x)\n")
    deep = torch.fx.symbolic_trace(lambda x: torch.relu(torch.relu(torch.relu(torch.relu(x)))))
    before = deep.code
    with pytest.raises(fxrules.FxrConvergenceError, match="after max_passes=1 passes: relu_twice"):
        fxrules.apply(deep, rules, max_passes=1)
    assert deep.code == before
    assert fxrules.apply(deep, rules, max_passes=2).counts() == {"relu_twice": 3}


# ---------------------------------------------------------------- autocast regions


def _addmm_under_autocast(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return torch.matmul(a, w) + b  # a bfloat16 matmul plus a float32 bias: float32


class _AddmmUnderAutocast(nn.Module):
    def forward(self, a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _addmm_under_autocast(a, w, b)


def test_backend_keeps_the_dtype_of_a_fusion_under_autocast() -> None:
    """In Dynamo's autocast region matmul + bias stays: autocast would run the fused addmm in bfloat16."""
    backend = fxrules.backend("fusions.fxr", then="eager")
    inputs = (torch.randn(4, 4), torch.randn(4, 4), torch.randn(4))
    result = torch.compile(_addmm_under_autocast, backend=backend)(*inputs)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result, _addmm_under_autocast(*inputs))
    assert _skips(backend.reports[0]) == {"addmm": ["autocast"]}


def test_exported_program_keeps_the_dtype_of_a_fusion_under_autocast() -> None:
    """In the subgraph of export's wrap_with_autocast matmul + bias stays, as in Dynamo's region."""
    inputs = (torch.randn(4, 4), torch.randn(4, 4), torch.randn(4))
    result = fxrules.apply_program(torch.export.export(_AddmmUnderAutocast(), inputs), "fusions.fxr")
    output = result.program.module()(*inputs)
    assert output.dtype == torch.float32
    torch.testing.assert_close(output, _addmm_under_autocast(*inputs))
    assert _skips(result.report) == {"addmm": ["autocast"]}


def test_an_identity_used_only_inside_its_no_grad_region_still_fires() -> None:
    """``neg(neg(x)) * 2`` inside ``torch.no_grad()`` becomes ``x * 2``, still computed without grad."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = torch.neg(torch.neg(x)) * 2
        return y * x

    backend = fxrules.backend("algebra.fxr", then="eager")
    x = torch.randn(5, requires_grad=True)
    _assert_same_gradients(torch.compile(fn, backend=backend), fn, x, [])
    assert backend.reports[0].counts() == {"double_neg": 1}
