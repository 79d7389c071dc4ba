"""fusions.fxr turns the attention of real transformers into scaled_dot_product_attention, in each trace kind.

Each case builds a model of ``tests/models.py`` (tiny configs, random weights, no downloads), captures it with
``torch.export`` (dead code erased) or Dynamo (through ``fxrules.backend``), rewrites it with ``fusions.fxr`` and
checks which rules fired, how many ``scaled_dot_product_attention`` calls the graphs then hold, and that the model
computes what it computed before; ``tests/rulesets/test_real_models.py`` does the same for the symbolic traces.
The forms that stay eager (the casts ``torch.export`` asserts on, weights that are returned) are pinned too, so a
rule that starts matching them fails here: docs/rulesets.md says why they stay.
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


def test_padding_that_hides_every_key_keeps_the_nan_of_multihead_attention() -> None:
    """A sequence whose every key is padded gives nan in eager nn.MultiheadAttention; after sdpa_baddbmm too."""
    case = build("attention_block")
    x, padding = case.inputs
    padding = padding.clone()
    padding[0] = True
    expected = run(case.gm, (x, padding))
    fired, _, _ = rewrite_traced(case)
    assert fired == {"sdpa_baddbmm": 1}
    actual = run(case.gm, (x, padding))
    assert expected[0].isnan().all() and not expected[1].isnan().any()
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL, equal_nan=True)


def _llama_attention(training: bool) -> Callable[..., torch.Tensor]:
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        probs = F.softmax(q @ k.transpose(2, 3) / 2.0 + mask, dim=-1, dtype=torch.float32).to(q.dtype)
        return F.dropout(probs, p=0.1, training=training) @ v
    return attention


def _fired(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> dict[str, int]:
    return fxrules.apply(torch.fx.symbolic_trace(fn), "fusions.fxr", example_inputs=inputs).counts()


@pytest.mark.parametrize(("training", "dtype", "fired"), [
    (False, torch.float32, {"sdpa_masked_div_float32_softmax": 1}),
    (True, torch.float32, {}),  # dropout in training mode is random: never fused
    (False, torch.float64, {}),  # the softmax rounds to float32 there: SDPA in float64 would not
])
def test_llama_attention_fuses_only_in_eval_mode_and_float32(training: bool, dtype: torch.dtype,
                                                             fired: dict[str, int]) -> None:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8, generator=generator, dtype=dtype) for _ in range(3))
    mask = torch.zeros(2, 1, 5, 5, dtype=dtype)
    assert _fired(_llama_attention(training), [q, k, v, mask]) == fired


def test_llama_attention_fuses_under_dynamo_after_algebra_drops_its_cast() -> None:
    """Dynamo writes Llama's cast back as .to(torch.float32), which algebra.fxr's to_same_dtype drops first when
    the rulesets are applied together; the attention still becomes SDPA."""
    case = build("llama")
    backend = fxrules.backend(["algebra.fxr", "fusions.fxr", "cleanup.fxr"], then="eager")
    torch._dynamo.reset()
    expected = run(case.eager, case.inputs)
    actual = run(torch.compile(case.eager, backend=backend), case.inputs)
    fired: Counter[str] = Counter()
    for report in backend.reports:
        fired.update(report.counts())
    assert fired["sdpa_masked_div_float32_softmax"] == 2 and fired["to_same_dtype"] == 12
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
