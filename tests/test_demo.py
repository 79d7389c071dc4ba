"""The README's first command: `fxrules demo` rewrites two models and measures them."""

from __future__ import annotations

import time

from fxrules.demo import run_demo


def test_demo_rewrites_both_models_and_keeps_outputs() -> None:
    printed: list[str] = []
    started = time.perf_counter()
    results = run_demo(printed.append)
    assert time.perf_counter() - started < 60
    cnn, encoder = results
    assert cnn["fired"] == {"fold_conv2d_bn": 9}
    # the encoder's sizes are symbols: its shape arithmetic stays (skipped for `dynamic size`), so the rewritten
    # encoder runs at every batch size and sequence length the traced one does
    assert encoder["fired"] == {"sdpa_masked_div": 4, "gelu_tanh": 4, "dropout_eval": 8}
    for result in results:
        assert result["nodes_after"] < result["nodes_before"]
        assert result["max_difference"] < 1e-4
        assert result["ms_before"] > 0 and result["ms_after"] > 0
    text = "\n".join(printed)
    assert "=== ResNet-style CNN ===" in text and "=== Transformer encoder ===" in text
    assert "nodes: 35 -> 26" in text and "nodes: 207 -> 155" in text  # SDPA keeps nan rows: + sum(softmax(mask)) * 0
    assert "static_shape_attribute      0       20" in text
    assert "view(8, 32" not in text
