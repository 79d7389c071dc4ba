"""What the bundled rulesets buy on the real models of the test corpus, eager and under ``torch.compile``.

Run ``python benchmarks/bench_models.py`` (every model, eager and compiled) or ``--no-compile`` (eager only);
see ``benchmarks/README.md``.

For each model of ``tests/models.py`` (tiny configs, random weights, no downloads):

* **eager**: the traced graph module before and after ``fxrules.apply`` with ``algebra.fxr``,
  ``fusions.fxr`` and ``cleanup.fxr`` (nodes, and CPU latency of one call);
* **compiled**: ``torch.compile(model)`` (Inductor) against
  ``torch.compile(model, backend=fxrules.backend(rules, then="inductor"))``: the same Dynamo graphs, rewritten
  before Inductor sees them.

Latencies are taken on one thread, before and after alternately (so that load from other jobs hits both), and
reported as the median and the interquartile range of the runs, in milliseconds.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/models.py holds the corpus

import fxrules
from tests.models import BLOCKS, MODELS, ModelCase, run

RULES = ["algebra.fxr", "fusions.fxr", "cleanup.fxr"]
SDPA = (torch.nn.functional.scaled_dot_product_attention, torch.ops.aten.scaled_dot_product_attention.default)


def latencies(before: Callable[[], Any], after: Callable[[], Any], runs: int, warmup: int = 3
              ) -> tuple[list[float], list[float]]:
    """Milliseconds per call of two callables, measured alternately (which goes first alternates too), after
    ``warmup`` calls of each."""
    times: tuple[list[float], list[float]] = ([], [])
    pairs = [(before, times[0]), (after, times[1])]
    with torch.no_grad():
        for _ in range(warmup):
            before(), after()
        for index in range(runs):
            for call, sink in pairs if index % 2 == 0 else pairs[::-1]:
                started = time.perf_counter()
                call()
                sink.append((time.perf_counter() - started) * 1000)
    return times


def summary(times: list[float]) -> dict[str, float]:
    """Median and interquartile range."""
    quartiles = statistics.quantiles(times, n=4)
    return {"median": statistics.median(times), "iqr": quartiles[2] - quartiles[0]}


def sdpa_calls(gm: torch.fx.GraphModule) -> int:
    return sum(len(gm.graph.find_nodes(op="call_function", target=target)) for target in SDPA)


def eager(case: ModelCase, runs: int) -> dict[str, Any]:
    """The traced graph before and after the rewrite, both copies of the traced module (so that what a copy
    keeps or drops, such as torch.export's input checks, is the same on both sides)."""
    original, rewritten = copy.deepcopy(case.gm), copy.deepcopy(case.gm)
    report = fxrules.apply(rewritten, RULES, example_inputs=case.inputs)
    torch.testing.assert_close(run(rewritten, case.inputs), run(original, case.inputs), atol=1e-5, rtol=1e-4)
    before, after = latencies(lambda: original(*case.inputs), lambda: rewritten(*case.inputs), runs)
    return {"nodes_before": report.nodes_before, "nodes_after": report.nodes_after, "fired": report.counts(),
            "sdpa_after": sdpa_calls(rewritten), "eager_before": summary(before), "eager_after": summary(after)}


def compiled(case: ModelCase, runs: int) -> dict[str, Any]:
    """Plain torch.compile against fxrules.backend then Inductor, both on the eager model."""
    torch._dynamo.reset()
    backend = fxrules.backend(RULES, then="inductor")
    plain = torch.compile(case.eager)
    rewritten = torch.compile(copy.deepcopy(case.eager), backend=backend)
    try:
        expected = run(case.eager, case.inputs)
        torch.testing.assert_close(run(plain, case.inputs), expected, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(run(rewritten, case.inputs), expected, atol=1e-5, rtol=1e-4)
    except Exception as error:  # Dynamo or Inductor failing on the model is a result to report, not a crash
        return {"compile_error": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"}
    before, after = latencies(lambda: plain(*case.inputs), lambda: rewritten(*case.inputs), runs)
    fired: dict[str, int] = {}
    for report in backend.reports:
        for rule, count in report.counts().items():
            fired[rule] = fired.get(rule, 0) + count
    return {"graphs": len(backend.reports), "compiled_fired": fired,
            "compiled_before": summary(before), "compiled_after": summary(after)}


def cell(result: dict[str, Any], key: str) -> str:
    value = result.get(key)
    return "—" if value is None else f"{value['median']:.3f} ± {value['iqr'] / 2:.3f}"


def ratio(result: dict[str, Any], before: str, after: str) -> str:
    if before not in result:
        return "—"
    return f"{result[before]['median'] / result[after]['median']:.2f}x"


def table(results: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of docs/rulesets.md."""
    lines = ["| model | nodes | SDPA after | eager ms before | eager ms after | eager speedup | "
             "compiled ms (Inductor) | compiled ms (fxrules + Inductor) | compiled speedup |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model, result in results.items():
        compile_cells = (["fails: " + result["compile_error"].split(":")[0]] * 2 + ["—"] if "compile_error" in result
                         else [cell(result, "compiled_before"), cell(result, "compiled_after"),
                               ratio(result, "compiled_before", "compiled_after")])
        lines.append(f"| {model} | {result['nodes_before']} → {result['nodes_after']} | {result['sdpa_after']} | "
                     f"{cell(result, 'eager_before')} | {cell(result, 'eager_after')} | "
                     f"{ratio(result, 'eager_before', 'eager_after')} | " + " | ".join(compile_cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--runs", type=int, default=50, help="timed calls of each variant (default 50)")
    parser.add_argument("--no-compile", action="store_true", help="eager only: skip torch.compile")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    options = parser.parse_args(argv)
    factories = {**MODELS, **BLOCKS}
    names = options.models.split(",") if options.models else list(factories)
    unknown = sorted(set(names) - set(factories))
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(factories)}")
    torch.set_num_threads(1)
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        result = eager(factories[name](), options.runs)
        if not options.no_compile:
            result.update(compiled(factories[name](), options.runs))
        results[name] = result
        print(f"{name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    print(table(results))
    if options.json:
        options.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
