"""The README's first command: `fxrules demo` rewrites its models and measures them."""

from __future__ import annotations

import time

import pytest

from fxrules.demo import run_demo


def test_demo_rewrites_every_model_and_keeps_outputs() -> None:
    pytest.importorskip("transformers")
    printed: list[str] = []
    started = time.perf_counter()
    results = run_demo(printed.append)
    assert time.perf_counter() - started < 60
    cnn, encoder, llama = results
    assert cnn["fired"] == {"fold_conv2d_bn": 9}
    # the encoder's sizes are symbols: its shape arithmetic stays (skipped for `dynamic size`), so the rewritten
    # encoder runs at every batch size and sequence length the traced one does
    assert encoder["fired"] == {"sdpa_masked_div": 4, "gelu_tanh": 4, "dropout_eval": 8}
    # Llama: attention with its float32 softmax, and RMS norm once algebra.fxr has dropped the casts to float32
    assert llama["fired"] == {"sdpa_masked_div_float32_softmax": 2, "rms_norm": 5, "mul_one": 2, "to_same_dtype": 5,
                              "dropout_eval": 2}
    for result in results:
        assert result["nodes_after"] < result["nodes_before"]
        assert result["max_difference"] < 1e-4
        assert result["ms_before"] > 0 and result["ms_after"] > 0
        assert result["ms_spread_before"] >= 0 and result["ms_spread_after"] >= 0
    text = "\n".join(printed)
    assert "=== ResNet-style CNN ===" in text and "=== Transformer encoder ===" in text
    assert "=== Llama (tiny random config) ===" in text
    assert text.count("eager CPU time (median ± half the interquartile range of 15 runs, one thread): ") == 3
    assert "nodes: 35 -> 26" in text and "nodes: 207 -> 155" in text  # SDPA keeps nan rows: + sum(softmax(mask)) * 0
    assert "nodes: 282 -> 223" in text
    assert "static_shape_attribute      0       20" in text
    assert "view(8, 32" not in text
