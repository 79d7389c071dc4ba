"""Benchmark ``fxrules.replace_pattern`` against ``torch.fx.subgraph_rewriter.replace_pattern``.

Run ``python benchmarks/bench_replace_pattern.py [--sizes 5000 20000] [--runs 3]``.

The graph and the nine pattern/replacement pairs are those of ``bench_apply.py``.  Each tool is called once
per pair, in the same order, on its own copy of the graph (as a user migrating from torch would call it).
Before timing, the two are checked to return as many matches for every pair, to leave graphs of the same
operations and to compute the same.  Times are the median of ``--runs`` runs, in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.fx import subgraph_rewriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_apply import REPLACE_PATTERN_PAIRS, example_input, fresh, timed, trace

import fxrules

Replacer = Callable[[torch.fx.GraphModule, Any, Any], list[Any]]
TOOLS: dict[str, Replacer] = {"torch": subgraph_rewriter.replace_pattern, "fxrules": fxrules.replace_pattern}


def run(tool: Replacer, gm: torch.fx.GraphModule) -> dict[str, int]:
    return {name: len(tool(gm, pattern, replacement)) for name, (pattern, replacement) in REPLACE_PATTERN_PAIRS.items()}


def check(size: int) -> dict[str, int]:
    """Both tools return as many matches for every pair, leave graphs of the same operations and compute
    the same."""
    base = trace(size)
    graphs = {name: fresh(base) for name in TOOLS}
    counts = {name: run(tool, graphs[name]) for name, tool in TOOLS.items()}
    if counts["torch"] != counts["fxrules"]:
        raise SystemExit(f"match counts differ at {size} nodes: {counts}")
    operations = {name: Counter((n.op, str(n.target)) for n in gm.graph.nodes if n.users or n.op == "output")
                  for name, gm in graphs.items()}
    if operations["torch"] != operations["fxrules"]:
        raise SystemExit(f"rewritten graphs differ at {size} nodes")
    torch.testing.assert_close(graphs["torch"](example_input()), graphs["fxrules"](example_input()))
    return counts["torch"]


def measure(size: int, runs: int) -> dict[str, Any]:
    base = trace(size)
    row: dict[str, Any] = {"nodes": len(base.graph.nodes), "matches": sum(check(size).values())}
    for name, tool in TOOLS.items():
        times = []
        for _ in range(runs):
            gm = fresh(base)
            seconds, _ = timed(lambda gm=gm, tool=tool: run(tool, gm))
            times.append(seconds)
        row[name] = statistics.median(times)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 20000], help="graph sizes in nodes")
    parser.add_argument("--runs", type=int, default=3, help="runs per tool and size (the median is shown)")
    args = parser.parse_args()
    print(f"{'nodes':>7} {'matches':>8} {'torch s':>9} {'fxrules s':>10} {'speed-up':>9}")
    for size in args.sizes:
        row = measure(size, args.runs)
        print(f"{row['nodes']:>7} {row['matches']:>8} {row['torch']:>9.3f} {row['fxrules']:>10.3f} "
              f"{row['torch'] / row['fxrules']:>8.1f}x")


if __name__ == "__main__":
    main()
