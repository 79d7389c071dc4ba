"""``fxrules demo``: the bundled rulesets applied to small models, with everything measured.

A ResNet-style CNN (conv + BatchNorm + ReLU blocks with residuals), a
Transformer encoder written the way eager PyTorch code is (attention as
``softmax(q @ k^T / sqrt(d)) @ v``, GELU as its tanh formula, dropout) and,
when ``transformers`` is installed, a Hugging Face Llama built from a tiny
random-weight config (eager attention, RMS norm; nothing is downloaded) are
traced, rewritten with ``fusions.fxr``, ``algebra.fxr`` and ``cleanup.fxr``,
and compared: the report, a short diff of the generated code, node counts,
the largest output difference and the eager CPU time (one thread) before and after.
"""

from __future__ import annotations

import copy
import difflib
import functools
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F  # noqa: N812 - the conventional name

from fxrules.engine.driver import apply

RULESETS = ["fusions.fxr", "algebra.fxr", "cleanup.fxr"]


class ConvBlock(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class ResNetStyle(torch.nn.Module):
    """A small ResNet: a stem and residual blocks, every convolution followed by BatchNorm."""

    def __init__(self, channels: int = 32, blocks: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.stem_bn = torch.nn.BatchNorm2d(channels)
        self.blocks = torch.nn.Sequential(*(ConvBlock(channels) for _ in range(blocks)))
        self.head = torch.nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem_bn(self.stem(x)))
        x = self.blocks(x)
        return self.head(x.mean((2, 3)))


class EncoderLayer(torch.nn.Module):
    """A post-norm Transformer encoder layer with eager attention and GELU spelled out."""

    def __init__(self, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.query = torch.nn.Linear(width, width)
        self.key = torch.nn.Linear(width, width)
        self.value = torch.nn.Linear(width, width)
        self.out = torch.nn.Linear(width, width)
        self.dropout = torch.nn.Dropout(0.1)
        self.norm1 = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)
        self.norm2 = torch.nn.LayerNorm(width)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        probs = self.dropout(F.softmax(scores, dim=-1))
        attended = torch.matmul(probs, v).transpose(1, 2).contiguous()
        batch, length = attended.shape[0], attended.shape[1]
        x = self.norm1(x + self.out(attended.reshape(batch, length, -1)))
        h = self.up(x)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return self.norm2(x + self.dropout(self.down(h)))


class Encoder(torch.nn.Module):
    def __init__(self, layers: int = 4, width: int = 64) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(EncoderLayer(width) for _ in range(layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return x


def _llama() -> tuple[str, torch.fx.GraphModule, tuple[torch.Tensor, ...]] | None:
    """A 2-layer Llama from a tiny config with random weights, traced by transformers' own tracer."""
    try:
        import transformers
        from transformers.utils.fx import symbolic_trace
    except ImportError:
        return None
    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      attn_implementation="eager", use_cache=False)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, config.vocab_size, (4, 32))
    mask = torch.ones(4, 32, dtype=torch.long)
    mask[1, -4:] = 0  # padding at the end of one sequence
    return "Llama (tiny random config)", symbolic_trace(model, input_names=["input_ids", "attention_mask"]), (ids, mask)


def _models() -> list[tuple[str, torch.fx.GraphModule, tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    cnn = ResNetStyle()
    for module in cnn.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            assert module.running_mean is not None and module.running_var is not None  # tracked by default
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)
    mask = torch.zeros(8, 1, 1, 32)
    mask[:, :, :, 28:] = torch.finfo(torch.float32).min  # padding at the end of each sequence
    models = [
        ("ResNet-style CNN", torch.fx.symbolic_trace(cnn.eval()), (torch.randn(8, 3, 32, 32),)),
        ("Transformer encoder", torch.fx.symbolic_trace(Encoder().eval()), (torch.randn(8, 32, 64), mask)),
    ]
    llama = _llama()
    return models if llama is None else [*models, llama]


def _tensors(output: Any) -> list[torch.Tensor]:
    """The tensors of a model's output: a tensor, or the values of a Hugging Face ``ModelOutput``."""
    if isinstance(output, torch.Tensor):
        return [output]
    values = output.values() if isinstance(output, dict) else output
    return [tensor for value in values for tensor in _tensors(value)]


def _largest_difference(expected: Any, actual: Any) -> float:
    pairs = zip(_tensors(expected), _tensors(actual), strict=True)
    return max((e - a).abs().max().item() for e, a in pairs)


def _timings_ms(before: Callable[[], Any], after: Callable[[], Any],
                repeats: int = 15) -> tuple[tuple[float, float], tuple[float, float]]:
    """(median, half the interquartile range) of the run times of two callables on one thread, measured
    alternately so that load on a shared machine hits both (several threads on busy cores wait for each
    other, and the times say more of the load than of the models); the spread says how far to trust them."""
    times: tuple[list[float], list[float]] = ([], [])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            before(), after()
            for _ in range(repeats):
                for run, sink in ((before, times[0]), (after, times[1])):
                    started = time.perf_counter()
                    run()
                    sink.append(time.perf_counter() - started)
    finally:
        torch.set_num_threads(threads)
    return _median_and_spread(times[0]), _median_and_spread(times[1])


def _median_and_spread(seconds: list[float]) -> tuple[float, float]:
    low, middle, high = statistics.quantiles(seconds, n=4)
    return middle * 1000, (high - low) / 2 * 1000


def _short_diff(before: str, after: str, lines: int = 24) -> str:
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm="", n=0))
    shown = [line[:110] for line in diff[:lines]]
    if len(diff) > lines:
        shown.append(f"... ({len(diff) - lines} more diff lines)")
    return "\n".join(shown)


def run_demo(print_: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Rewrite each demo model; print and return what was measured."""
    results = []
    for name, gm, inputs in _models():
        original = copy.deepcopy(gm)
        before_code = gm.code
        report = apply(gm, RULESETS, example_inputs=list(inputs))
        with torch.no_grad():
            expected, actual = original(*inputs), gm(*inputs)
        difference = _largest_difference(expected, actual)
        (time_before, spread_before), (time_after, spread_after) = _timings_ms(
            functools.partial(original, *inputs), functools.partial(gm, *inputs))
        print_(f"=== {name} ===")
        print_(report.table(every_rule=False))
        print_(_short_diff(before_code, gm.code))
        print_(f"nodes: {report.nodes_before} -> {report.nodes_after}")
        print_(f"largest output difference: {difference:.3g}")
        print_(f"eager CPU time (median ± half the interquartile range of 15 runs, one thread): "
               f"{time_before:.2f} ± {spread_before:.2f} ms -> {time_after:.2f} ± {spread_after:.2f} ms "
               f"({time_before / time_after:.2f}x)\n")
        results.append({"model": name, "fired": report.counts(), "nodes_before": report.nodes_before,
                        "nodes_after": report.nodes_after, "max_difference": difference,
                        "ms_before": time_before, "ms_after": time_after,
                        "ms_spread_before": spread_before, "ms_spread_after": spread_after})
    return results
