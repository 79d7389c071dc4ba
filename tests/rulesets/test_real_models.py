"""Every bundled ruleset on real models: BERT, GPT-2, T5, Llama, ViT, torch's transformer layers, a CNN.

Each test rewrites a freshly traced model (``tests/models.py``) with ``example_inputs``, checks that the
graph lints and computes what it computed before, and asserts exactly which rules fired and how often,
so a rule that silently stops (or starts) matching on code written outside this project fails here.
The sizes of ``example_inputs`` are symbols, so the shape folding of ``cleanup.fxr`` fires only with
``static_shapes=True``; without it, a model rewritten at one batch size and sequence length runs at others.

The tables say what *should* fire.  Where a rule misbehaves today the expectation is not weakened:
the test fails until the rule or the engine is fixed (see the comments in the tables).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import Counter
from collections.abc import Callable

import pytest
import torch
import torch.fx

import fxrules
from fxrules.lang.bundled import ruleset_names
from tests.models import MODELS, VOCAB, ModelCase, run

F = torch.nn.functional

#: Fusions change the order of floating point operations (SDPA, folded BatchNorm): compare loosely.
ATOL, RTOL = 1e-5, 1e-4

#: Rules fired per model and bundled ruleset, each ruleset applied alone.
EXPECTED: dict[str, dict[str, dict[str, int]]] = {
    "bert": {  # 2 layers: dropout after the embeddings and 3 per layer; one masked attention per layer
        "algebra.fxr": {"dropout_eval": 7},
        "fusions.fxr": {"sdpa_masked_div": 2},
        "cleanup.fxr": {},  # every size it would fold depends on the batch or the sequence length
    },
    "gpt2": {  # 2 layers: NewGELU (tanh formula) once per layer; attention masks with torch.finfo(dtype).min,
        # which no rule can name, so it stays (docs/rulesets.md)
        "algebra.fxr": {"dropout_eval": 7},
        "fusions.fxr": {"gelu_tanh": 2},
        "cleanup.fxr": {},
    },
    "t5": {  # 2 + 2 layers: unscaled attention with a position bias, RMS norm (5 per stack), ReLU MLP
        "algebra.fxr": {"add_zero": 2, "to_same_dtype": 12, "dropout_eval": 24},  # add_zero: integer buckets + 0
        # the attention of each stack's first layer stays: its scores' device is read to build the position bias
        "fusions.fxr": {"sdpa_unscaled_bias": 3, "rms_norm_float32": 12},
        # clone_single_use must not fire: the causal mask's `clone = expand.clone()` is written in place
        # (`clone[...] = masked_fill`) right after; without the clone that write hits the expanded view.
        "cleanup.fxr": {},
    },
    "llama": {  # rotary scaling `* 1.0` twice; softmax(..., dtype=float32).to(dtype); 2 x 2 + 1 RMS norms
        "algebra.fxr": {"mul_one": 2, "to_same_dtype": 5, "dropout_eval": 2},
        "fusions.fxr": {"sdpa_masked_div_float32_softmax": 2, "rms_norm_float32": 5},
        # clone_single_use must not fire: the same in-place write into the cloned causal mask as in T5.
        "cleanup.fxr": {},
    },
    "vit": {  # 2 layers: dropout after the embeddings and 3 per layer; unmasked attention once per layer
        "algebra.fxr": {"dropout_eval": 7},
        "fusions.fxr": {"sdpa_div": 2},
        "cleanup.fxr": {},
    },
    "transformer_encoder_layer": {  # exported: attention is already aten SDPA; three aten dropouts
        "algebra.fxr": {"dropout_eval": 3},
        "fusions.fxr": {},
        "cleanup.fxr": {},
    },
    "multihead_attention": {  # exported: bmm/softmax/bmm, but the weights are returned: the softmax stays
        "algebra.fxr": {},
        "fusions.fxr": {},
        "cleanup.fxr": {},
    },
    "cnn": {  # five conv+bn pairs (3 x 2d, 1d, 3d), Linear+BatchNorm1d head, a written-out swish, nn.Dropout
        "algebra.fxr": {"dropout_eval": 1},
        "fusions.fxr": {"fold_conv2d_bn": 3, "fold_conv1d_bn": 1, "fold_conv3d_bn": 1, "fold_linear_bn": 1,
                        "silu": 1},
        "cleanup.fxr": {},
    },
}

#: scaled_dot_product_attention calls after fusions.fxr: every eager attention of the model fused (T5: but in the
#: first layer of each stack; GPT-2: none, see EXPECTED), the encoder layer's own kept.
SDPA_AFTER_FUSIONS = {"bert": 2, "gpt2": 0, "t5": 3, "llama": 2, "vit": 2, "transformer_encoder_layer": 1,
                      "multihead_attention": 0, "cnn": 0}

#: What cleanup.fxr folds with static_shapes=True: the graph specialized to the example's sizes (2, 8).
STATIC_CLEANUP: dict[str, dict[str, int]] = {
    "bert": {"static_size_call": 10, "getitem_of_tuple": 3, "slice_of_tuple": 8, "tuple_concat": 8},
    "gpt2": {"static_size_call": 18, "static_size_dim": 15, "getitem_of_tuple": 3, "slice_of_tuple": 17,
             "tuple_concat": 18},
    "t5": {"static_size_call": 18, "getitem_of_tuple": 30, "slice_of_tuple": 6},
    "llama": {"static_size_call": 23, "getitem_of_tuple": 37},
    "vit": {"static_size_call": 10, "getitem_of_tuple": 8, "slice_of_tuple": 8, "tuple_concat": 8},
    "transformer_encoder_layer": {},
    "multihead_attention": {},
    "cnn": {},
}

#: Batch sizes and sequence lengths the token models run at after a rewrite with example inputs of (2, 8).
BATCHES, SEQUENCES = (1, 2, 3), (5, 8, 13)

#: Every bundled ruleset in one apply, in this order.
ALL = ("algebra.fxr", "fusions.fxr", "cleanup.fxr")

RULESETS = sorted(next(iter(EXPECTED.values())))


#: Where rulesets applied together fire another rule than alone: algebra.fxr's to_same_dtype drops the casts of
#: Hugging Face's RMS norms to float32 first, and rms_norm fuses what is left instead of rms_norm_float32.
TOGETHER_INSTEAD = {"llama": {"rms_norm_float32": "rms_norm"}, "t5": {"rms_norm_float32": "rms_norm"}}


def expected_together(model: str) -> dict[str, int]:
    """Applied together, the rulesets fire what each fires alone (but for :data:`TOGETHER_INSTEAD`)."""
    total: Counter[str] = Counter()
    instead = TOGETHER_INSTEAD.get(model, {})
    for ruleset in ALL:
        total.update({instead.get(rule, rule): count for rule, count in EXPECTED[model][ruleset].items()})
    return dict(total)


def rewrite(case: ModelCase, rules: str | list[str], static_shapes: bool = False) -> fxrules.Report:
    """Apply ``rules`` to ``case.gm`` with its example inputs; assert it lints and its outputs are unchanged."""
    expected = run(case.gm, case.inputs)
    report = fxrules.apply(case.gm, rules, example_inputs=case.inputs, static_shapes=static_shapes)
    case.gm.graph.lint()
    try:
        actual = run(case.gm, case.inputs)
    except Exception as error:
        raise AssertionError(f"the rewritten graph fails to run: {type(error).__name__}: {error}\n"
                             f"fired: {report.counts()}\n{report}") from error
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
    return report


def explained(model: str, rules: str | list[str], static_shapes: bool = False) -> str:
    """The same rewrite of a fresh copy with near misses, for a failure message."""
    case = MODELS[model]()
    return str(fxrules.apply(case.gm, rules, example_inputs=case.inputs, explain=True, static_shapes=static_shapes))


def calls(gm: torch.fx.GraphModule, target: object) -> list[torch.fx.Node]:
    return list(gm.graph.find_nodes(op="call_function", target=target))


def module_calls(gm: torch.fx.GraphModule, kinds: tuple[type[torch.nn.Module], ...]) -> list[torch.fx.Node]:
    return [n for n in gm.graph.find_nodes(op="call_module") if isinstance(gm.get_submodule(n.target), kinds)]


def test_every_bundled_ruleset_has_expectations() -> None:
    assert sorted(ruleset_names()) == RULESETS, "record what a new bundled ruleset fires on every model in EXPECTED"
    assert set(ALL) == set(RULESETS)
    assert all(sorted(table) == RULESETS for table in EXPECTED.values())
    assert sorted(STATIC_CLEANUP) == sorted(MODELS) == sorted(SDPA_AFTER_FUSIONS)


@pytest.mark.parametrize("model", MODELS)
def test_trace_computes_what_the_eager_model_computes(model: str) -> None:
    case = MODELS[model]()
    torch.testing.assert_close(run(case.gm, case.inputs), run(case.eager, case.inputs), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("ruleset", RULESETS)
@pytest.mark.parametrize("model", MODELS)
def test_ruleset_on_model(model: str, ruleset: str) -> None:
    case = MODELS[model]()
    report = rewrite(case, ruleset)
    assert report.counts() == EXPECTED[model][ruleset], explained(model, ruleset)
    if ruleset == "fusions.fxr":
        sdpa = (F.scaled_dot_product_attention, torch.ops.aten.scaled_dot_product_attention.default)
        assert sum(len(calls(case.gm, target)) for target in sdpa) == SDPA_AFTER_FUSIONS[model], case.gm.code


@pytest.mark.parametrize("model", MODELS)
def test_all_rulesets_together(model: str) -> None:
    report = rewrite(MODELS[model](), list(ALL))
    assert report.counts() == expected_together(model), explained(model, list(ALL))


@pytest.mark.parametrize("model", MODELS)
def test_cleanup_folds_shapes_only_with_static_shapes(model: str) -> None:
    """Without static_shapes every fold of a size the example shows is skipped for `dynamic size`; with it,
    the shape arithmetic is folded to the example's sizes."""
    dynamic = fxrules.apply(MODELS[model]().gm, "cleanup.fxr", example_inputs=MODELS[model]().inputs)
    folded = sum(STATIC_CLEANUP[model].get(rule, 0) for rule in ("static_size_call", "static_size_dim"))
    assert sum(rule.skip_counts.get("dynamic size", 0) for rule in dynamic.rules) == folded
    report = rewrite(MODELS[model](), "cleanup.fxr", static_shapes=True)
    assert report.counts() == STATIC_CLEANUP[model], explained(model, "cleanup.fxr", static_shapes=True)


def token_inputs(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and an attention mask whose last row ends in two padding positions."""
    ids = torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(batch * 100 + length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, -2:] = 0
    return ids, mask


@pytest.mark.parametrize("model", ["gpt2", "bert", "llama"])
def test_rewritten_at_one_size_computes_the_model_at_every_size(model: str) -> None:
    """Rewritten with every bundled ruleset and example inputs of batch 2 and length 8, the graph computes what
    the eager model computes at every batch size and sequence length: nothing was specialized to (2, 8)."""
    case = MODELS[model]()
    report = fxrules.apply(case.gm, list(ALL), example_inputs=case.inputs)
    assert report.counts() == expected_together(model)
    for batch, length in itertools.product(BATCHES, SEQUENCES):
        inputs = token_inputs(batch, length)[: len(case.inputs)]
        torch.testing.assert_close(run(case.gm, inputs), run(case.eager, inputs), atol=ATOL, rtol=RTOL,
                                   msg=lambda text, b=batch, s=length: f"batch {b}, length {s}: {text}")


def test_bert_masked_attention_becomes_sdpa_with_the_mask() -> None:
    case = MODELS["bert"]()
    report = rewrite(case, "fusions.fxr")
    sdpa = calls(case.gm, F.scaled_dot_product_attention)
    assert len(sdpa) == 2, explained("bert", "fusions.fxr")
    assert all(node.kwargs.get("attn_mask") is not None for node in sdpa), case.gm.code
    assert not calls(case.gm, F.softmax), case.gm.code
    assert report.counts() == {"sdpa_masked_div": 2}


def test_vit_unmasked_attention_becomes_sdpa() -> None:
    case = MODELS["vit"]()
    rewrite(case, "fusions.fxr")
    sdpa = calls(case.gm, F.scaled_dot_product_attention)
    assert len(sdpa) == 2, explained("vit", "fusions.fxr")
    assert all(node.kwargs.get("attn_mask") is None for node in sdpa), case.gm.code
    assert not calls(case.gm, F.softmax), case.gm.code


def test_gpt2_new_gelu_becomes_gelu_tanh() -> None:
    case = MODELS["gpt2"]()
    rewrite(case, "fusions.fxr")
    gelus = calls(case.gm, F.gelu)
    assert len(gelus) == 2, explained("gpt2", "fusions.fxr")
    assert all(node.kwargs.get("approximate") == "tanh" for node in gelus), case.gm.code
    assert not calls(case.gm, torch.tanh) and not calls(case.gm, torch.pow), case.gm.code


def test_cnn_every_conv_bn_pair_folds() -> None:
    case = MODELS["cnn"]()
    batch_norms = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
    layers = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Linear)
    pairs = [bn for bn in module_calls(case.gm, batch_norms) if bn.args[0] in module_calls(case.gm, layers)]
    assert len(pairs) == 6  # the corpus itself: five conv+bn pairs and the Linear+BatchNorm1d head
    report = rewrite(case, "fusions.fxr")
    assert not module_calls(case.gm, batch_norms), explained("cnn", "fusions.fxr")
    assert not [m for m in case.gm.modules() if isinstance(m, batch_norms)], case.gm
    assert sum(n for rule, n in report.counts().items() if rule.startswith("fold_")) == len(pairs)
    assert len(module_calls(case.gm, layers)) == 6


def median_ms(case: ModelCase, runs: int = 30, warmup: int = 5) -> float:
    """Median wall time of one eager call of ``case.gm``, in milliseconds."""
    times = []
    with torch.no_grad():
        for index in range(warmup + runs):
            started = time.perf_counter()
            case.gm(*case.inputs)
            if index >= warmup:
                times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_eager_time_before_and_after(model: str, record_property: Callable[[str, object], None]) -> None:
    """Not a speed assertion: records nodes and eager CPU time (one thread) around rewriting with every ruleset."""
    case = MODELS[model]()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        before = median_ms(case)
        report = rewrite(case, list(ALL))
        after = median_ms(case)
    finally:
        torch.set_num_threads(threads)
    record_property("nodes", f"{report.nodes_before} -> {report.nodes_after}")
    record_property("fired", report.counts())
    record_property("eager_ms", f"{before:.3f} -> {after:.3f}")
    print(f"{model}: nodes {report.nodes_before} -> {report.nodes_after}, eager {before:.3f} -> {after:.3f} ms, "
          f"fired {report.counts()}")
