"""fusions.fxr turns the attention of real transformers into scaled_dot_product_attention, in each trace kind.

Each case builds a model of ``tests/models.py`` (tiny configs, random weights, no downloads), captures it the way
a user would (``transformers.utils.fx.symbolic_trace``, ``torch.export`` with dead code erased, or Dynamo through
``fxrules.backend``), rewrites it with ``fusions.fxr`` and checks which rules fired, how many
``scaled_dot_product_attention`` calls the graph then has, and that it computes what it computed before.  The
forms that stay eager (GPT-2's ``torch.finfo`` fill, the casts ``torch.export`` asserts on, weights that are
returned) are pinned too, so a rule that starts matching them fails here: docs/rulesets.md says why they stay.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx

import fxrules
from tests.models import BLOCKS, MODELS, ModelCase, exported, run

F = torch.nn.functional
ATOL, RTOL = 1e-5, 1e-4
SDPA = (F.scaled_dot_product_attention, torch.ops.aten.scaled_dot_product_attention.default)

#: (model, trace kind) -> the rules fusions.fxr fires and the SDPA calls the rewritten graphs hold.
CASES: dict[tuple[str, str], tuple[dict[str, int], int]] = {
    ("llama", "symbolic_trace"): ({"sdpa_masked_div_float32_softmax": 2, "rms_norm_float32": 5}, 2),
    # the first layer of each stack reads its scores' device for the position bias: 3 of 6 attentions stay
    ("t5", "symbolic_trace"): ({"sdpa_unscaled_bias": 3, "rms_norm_float32": 12}, 3),
    ("gpt2", "symbolic_trace"): ({"gelu_tanh": 2}, 0),  # the fill torch.finfo(dtype).min cannot be named
    ("bert", "export"): ({"sdpa_masked_div": 2}, 2),
    ("vit", "export"): ({"sdpa_div": 2}, 2),
    ("llama", "export"): ({}, 0),  # aten._assert_tensor_metadata reads the probabilities before .to(dtype)
    ("attention_block", "export"): ({"sdpa_baddbmm": 1}, 1),
    ("multihead_attention", "export"): ({}, 0),  # the averaged weights are returned: the softmax is needed
    ("transformer_encoder_layer", "export"): ({}, 1),  # already SDPA
    ("llama", "dynamo"): ({"sdpa_masked_div_float32_softmax": 2, "rms_norm_float32": 5}, 2),
    ("vit", "dynamo"): ({"sdpa_div": 2}, 2),
}


def build(model: str) -> ModelCase:
    return {**MODELS, **BLOCKS}[model]()


def sdpa_calls(graphs: list[torch.fx.GraphModule]) -> int:
    return sum(len(gm.graph.find_nodes(op="call_function", target=target)) for gm in graphs for target in SDPA)


def rewrite_traced(case: ModelCase) -> tuple[dict[str, int], list[torch.fx.GraphModule], Any]:
    """Rewrite the graph module itself (a symbolic trace or an exported module); return what fired and its output."""
    report = fxrules.apply(case.gm, "fusions.fxr", example_inputs=case.inputs)
    case.gm.graph.lint()
    return report.counts(), [case.gm], run(case.gm, case.inputs)


def rewrite_dynamo(case: ModelCase) -> tuple[dict[str, int], list[torch.fx.GraphModule], Any]:
    """Compile the eager model with fxrules.backend; keep the graphs Dynamo hands on after the rewrite."""
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, _inputs: list[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    backend = fxrules.backend("fusions.fxr", then=keep)
    torch._dynamo.reset()
    output = run(torch.compile(case.eager, backend=backend), case.inputs)
    fired: Counter[str] = Counter()
    for report in backend.reports:
        fired.update(report.counts())
    return dict(fired), graphs, output


@pytest.mark.parametrize(("model", "kind"), CASES)
def test_attention_becomes_sdpa(model: str, kind: str) -> None:
    case = build(model)
    if kind == "export":
        case = exported(case.eager, case.inputs, dead_code=False)
    expected = run(case.eager, case.inputs)
    fired, graphs, actual = (rewrite_dynamo if kind == "dynamo" else rewrite_traced)(case)
    rules, sdpa = CASES[model, kind]
    assert fired == rules
    assert sdpa_calls(graphs) == sdpa
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)


def test_llama_attention_keeps_no_softmax_but_the_mask_term() -> None:
    """After the rewrite Llama's only softmax is the one over the mask that keeps fully masked rows nan."""
    case = build("llama")
    rewrite_traced(case)
    softmaxes = [n for n in case.gm.graph.nodes if n.op == "call_function" and n.target is torch.softmax]
    assert len(softmaxes) == 2 and not case.gm.graph.find_nodes(op="call_function", target=F.softmax)
    sdpa = case.gm.graph.find_nodes(op="call_function", target=F.scaled_dot_product_attention)
    assert all(node.kwargs["attn_mask"] is softmax.args[0] for node, softmax in zip(sdpa, softmaxes, strict=True))
