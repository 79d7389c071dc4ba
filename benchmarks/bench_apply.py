"""Benchmark ``fxrules.apply`` against ``torch.fx.subgraph_rewriter.replace_pattern`` and Inductor's pattern matcher.

Run ``python benchmarks/bench_apply.py`` (all sizes) or ``--quick`` (a smoke run); see ``benchmarks/README.md``.

The same nine exact-target rules are written three ways (``.fxr`` text, replace_pattern
pattern/replacement pairs, Inductor ``PatternMatcherPass`` patterns) and applied to
``symbolic_trace`` graphs of 1k..50k nodes built from repeated blocks.  Each block holds
one rewrite site per rule and a set of near misses (other spellings, other literals,
escaping interior nodes) that none of the three tools may rewrite.  Before timing, the
three tools are checked to make the same replacements, rule by rule, and to give equal
outputs, on the 1k-node graph.
"""

from __future__ import annotations

import argparse
import copy
import gc
import itertools
import json
import math
import operator
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F  # noqa: N812 - the spelling the rules use
from torch._inductor.pattern_matcher import (
    CallFunction,
    CallMethod,
    KeywordArg,
    Match,
    PatternMatcherPass,
    register_graph_pattern,
)
from torch.fx.subgraph_rewriter import replace_pattern

import fxrules

# ---------------------------------------------------------------------------- the nine rules, three ways

RULE_NAMES = (
    "double_neg", "relu_twice", "mul_one", "add_zero", "sub_zero",
    "div_one", "silu", "double_transpose", "contiguous_twice",
)

#: Exact targets only (no families), so each rule matches what replace_pattern and Inductor match.
RULES_FXR = """
rule double_neg:
    torch.neg(torch.neg(x)) => x

rule relu_twice:
    torch.relu(torch.relu(x)) => torch.relu(x)

rule mul_one:
    x * 1 => x

rule add_zero:
    x + 0 => x

rule sub_zero:
    x - 0 => x

rule div_one:
    x / 1.0 => x

rule silu:
    torch.sigmoid(x) * x => F.silu(x)

rule double_transpose:
    torch.transpose(torch.transpose(x, 0, 1), 0, 1) => x

rule contiguous_twice:
    x.contiguous().contiguous() => x.contiguous()
"""

#: Rules anchored at targets the graph has plenty of, that never fire on it (the expensive way of
#: firing nothing): every anchor node has to be ruled out, most by the whole-graph narrowing of
#: candidates, and two per block (neg of a shared contiguous) match and are skipped (escaping user).
NOFIRE_TRIED_FXR = """
rule neg_thrice:
    torch.neg(torch.neg(torch.neg(x))) => torch.neg(x)

rule relu_thrice:
    torch.relu(torch.relu(torch.relu(x))) => torch.relu(x)

rule mul_three:
    x * 3 => torch.mul(x, 3)

rule add_seven:
    x + 7 => torch.add(x, 7)

rule sub_seven:
    x - 7 => torch.sub(x, 7)

rule div_three:
    x / 3.0 => torch.div(x, 3.0)

rule tanh_silu:
    torch.tanh(x) * x => torch.mul(torch.tanh(x), x)

rule transpose_12:
    torch.transpose(torch.transpose(x, 1, 2), 1, 2) => x

rule contiguous_neg:
    torch.neg(x.contiguous()) => torch.neg(x)
"""

#: Rules whose anchor targets do not occur in the graph at all (only the index lookup runs).
NOFIRE_ABSENT_FXR = """
rule exp_log:
    torch.exp(torch.log(x)) => x

rule abs_twice:
    torch.abs(torch.abs(x)) => torch.abs(x)

rule cos_neg:
    torch.cos(torch.neg(x)) => torch.cos(x)

rule floor_twice:
    torch.floor(torch.floor(x)) => torch.floor(x)

rule square:
    torch.pow(x, 2) => x * x
"""


# replace_pattern: one (pattern, replacement) pair per rule.  Literals in a traced pattern
# are compared by type and value (1 != 1.0), and interior nodes must not escape.
def _p_double_neg(x):
    return torch.neg(torch.neg(x))


def _r_double_neg(x):
    return x


def _p_relu_twice(x):
    return torch.relu(torch.relu(x))


def _r_relu_twice(x):
    return torch.relu(x)


def _p_mul_one(x):
    return x * 1


def _p_add_zero(x):
    return x + 0


def _p_sub_zero(x):
    return x - 0


def _p_div_one(x):
    return x / 1.0


def _r_identity(x):
    return x


def _p_silu(x):
    return torch.sigmoid(x) * x


def _r_silu(x):
    return F.silu(x)


def _p_double_transpose(x):
    return torch.transpose(torch.transpose(x, 0, 1), 0, 1)


def _p_contiguous_twice(x):
    return x.contiguous().contiguous()


def _r_contiguous_twice(x):
    return x.contiguous()


REPLACE_PATTERN_PAIRS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "double_neg": (_p_double_neg, _r_double_neg),
    "relu_twice": (_p_relu_twice, _r_relu_twice),
    "mul_one": (_p_mul_one, _r_identity),
    "add_zero": (_p_add_zero, _r_identity),
    "sub_zero": (_p_sub_zero, _r_identity),
    "div_one": (_p_div_one, _r_identity),
    "silu": (_p_silu, _r_silu),
    "double_transpose": (_p_double_transpose, _r_identity),
    "contiguous_twice": (_p_contiguous_twice, _r_contiguous_twice),
}


def make_inductor_pass(fired: Counter[str]) -> PatternMatcherPass:
    """The nine rules as an Inductor pattern pass; ``fired`` counts replacements per rule.

    Each handler builds the replacement before the matched output (``GraphPatternEntry``
    opens ``graph.inserting_before(output)``), redirects the output's users and erases the
    matched nodes, as ``fxrules`` and ``replace_pattern`` do.  Interior pattern nodes must
    have exactly one user (Inductor's default ``_users=1``), so escaping users are rejected.
    Inductor compares constants with ``!=`` (so ``1 == 1.0``); the graphs below avoid
    ``x * 1.0`` and ``x / 1``, on which it would differ from the other two.
    """
    pm_pass = PatternMatcherPass(pass_name="bench_fxrules")
    x = KeywordArg("x")

    def register(name: str, pattern: Any, build: Callable[[torch.fx.Graph, torch.fx.Node], torch.fx.Node]) -> None:
        def handler(match: Match, x: torch.fx.Node) -> None:
            output = match.output_node()
            graph = output.graph
            output.replace_all_uses_with(build(graph, x))
            for node in sorted(match.nodes, reverse=True):  # the output first, so interior nodes become dead
                if not node._erased and not node.users:
                    graph.erase_node(node)
            fired[name] += 1

        register_graph_pattern(pattern, pass_dict=pm_pass)(handler)

    def keep(graph: torch.fx.Graph, x: torch.fx.Node) -> torch.fx.Node:
        return x

    mul, add, sub, truediv = operator.mul, operator.add, operator.sub, operator.truediv
    register("double_neg", CallFunction(torch.neg, CallFunction(torch.neg, x)), keep)
    register("relu_twice", CallFunction(torch.relu, CallFunction(torch.relu, x)),
             lambda g, x: g.call_function(torch.relu, (x,)))
    register("mul_one", CallFunction(mul, x, 1), keep)
    register("add_zero", CallFunction(add, x, 0), keep)
    register("sub_zero", CallFunction(sub, x, 0), keep)
    register("div_one", CallFunction(truediv, x, 1.0), keep)
    register("silu", CallFunction(mul, CallFunction(torch.sigmoid, x), x), lambda g, x: g.call_function(F.silu, (x,)))
    register("double_transpose", CallFunction(torch.transpose, CallFunction(torch.transpose, x, 0, 1), 0, 1), keep)
    register("contiguous_twice", CallMethod("contiguous", CallMethod("contiguous", x)),
             lambda g, x: g.call_method("contiguous", (x,)))
    return pm_pass


# ---------------------------------------------------------------------------- the graphs

SIDE = 4  # inputs are SIDE x SIDE float64 tensors (square, so transposes keep shapes)


def block(h: torch.Tensor) -> torch.Tensor:
    """One block: a site for each of the nine rules, and near misses none of the tools may rewrite."""
    # Rewrite sites, one per rule, chained.
    a = torch.neg(torch.neg(h))                            # double_neg
    b = torch.relu(torch.relu(a))                          # relu_twice
    c = b * 1                                              # mul_one
    d = c + 0                                              # add_zero
    e = d - 0                                              # sub_zero
    f = e / 1.0                                            # div_one
    g = torch.sigmoid(f) * f                               # silu
    t = torch.transpose(torch.transpose(g, 0, 1), 0, 1)    # double_transpose
    u = t.contiguous().contiguous()                        # contiguous_twice
    # Near misses: the same operations under other spellings (the rules name exact targets).
    m1 = F.relu(F.relu(u))
    m2 = u.relu().relu()
    m3 = torch.relu(F.relu(u))
    m4 = -(-u)  # noqa: B002 - operator.neg twice
    m5 = u.neg().neg()
    m6 = torch.mul(u, 1)
    m7 = torch.add(u, 0)
    m8 = torch.sub(u, 0)
    m9 = torch.div(u, 1.0)
    m10 = u.sigmoid() * u
    m11 = u.transpose(0, 1).transpose(0, 1)
    # Near misses: other literals, other operands.
    m12 = u * 2
    m13 = u + 1
    m14 = u - 1
    m15 = u / 2.0
    m16 = torch.transpose(torch.transpose(u, 0, 1), 1, 0)
    m17 = torch.neg(u)
    m18 = torch.sigmoid(u) * m17
    # Near misses: an interior node with a user outside the pattern.
    n = torch.neg(u)
    m19 = torch.neg(n) * n
    r = torch.relu(u)
    m20 = torch.relu(r) * r
    s = torch.sigmoid(u)
    m21 = s * u + s
    k = u.contiguous()
    m22 = k.contiguous() * k
    total = (u + m1 + m2 + m3 + m4 + m5 + m6 + m7 + m8 + m9 + m10 + m11 + m12 + m13 + m14 + m15 + m16 + m18
             + m19 + m20 + m21 + m22)
    return torch.tanh(total * 0.1)


class Blocks(torch.nn.Module):
    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.count):
            x = block(x)
        return x


def nodes_per_block() -> int:
    one, two = (len(torch.fx.symbolic_trace(Blocks(n)).graph.nodes) for n in (1, 2))
    return two - one


def blocks_for(size: int) -> int:
    return max(1, round(size / nodes_per_block()))


def trace(size: int) -> torch.fx.GraphModule:
    """A graph of about ``size`` nodes."""
    return torch.fx.symbolic_trace(Blocks(blocks_for(size)))


def fresh(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    return copy.deepcopy(gm)


def example_input() -> torch.Tensor:
    return torch.randn(SIDE, SIDE, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


# ---------------------------------------------------------------------------- the contenders

RULESET = fxrules.parse(RULES_FXR, filename="bench_rules.fxr")
NOFIRE_TRIED = fxrules.parse(NOFIRE_TRIED_FXR, filename="bench_nofire_tried.fxr")
NOFIRE_ABSENT = fxrules.parse(NOFIRE_ABSENT_FXR, filename="bench_nofire_absent.fxr")


def run_replace_pattern(gm: torch.fx.GraphModule) -> dict[str, int]:
    """replace_pattern once per rule (each call matches the whole graph and recompiles)."""
    return {name: len(replace_pattern(gm, p, r)) for name, (p, r) in REPLACE_PATTERN_PAIRS.items()}


def run_inductor(gm: torch.fx.GraphModule, pm_pass: PatternMatcherPass, fired: Counter[str]) -> dict[str, int]:
    fired.clear()
    pm_pass.apply(gm.graph)
    return dict(fired)


def bare_loop(gm: torch.fx.GraphModule) -> None:
    for _n in gm.graph.nodes:
        pass


def timed(fn: Callable[[], Any], collect: bool = True) -> tuple[float, Any]:
    """Wall time of ``fn()``, garbage collector off (as ``timeit`` does), after a collection."""
    if collect:
        gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        result = fn()
        return time.perf_counter() - started, result
    finally:
        gc.enable()


# ---------------------------------------------------------------------------- checking equivalence

def verify(size: int) -> dict[str, Any]:
    """On a ``size``-node graph, the three tools must make the same replacements and give equal outputs."""
    base = trace(size)
    blocks = blocks_for(size)
    x = example_input()
    expected = base(x)

    gm_fx = fresh(base)
    report = fxrules.apply(gm_fx, RULESET)
    gm_rp = fresh(base)
    rp_counts = run_replace_pattern(gm_rp)
    gm_ind = fresh(base)
    fired: Counter[str] = Counter()
    ind_counts = run_inductor(gm_ind, make_inductor_pass(fired), fired)
    gm_ind.graph.lint()
    gm_ind.recompile()

    counts = {
        "fxrules": {n: report.counts().get(n, 0) for n in RULE_NAMES},
        "replace_pattern": {n: rp_counts.get(n, 0) for n in RULE_NAMES},
        "inductor": {n: ind_counts.get(n, 0) for n in RULE_NAMES},
    }
    problems = []
    if not counts["fxrules"] == counts["replace_pattern"] == counts["inductor"]:
        problems.append(f"replacement counts differ: {counts}")
    per_block = {n: blocks for n in RULE_NAMES}
    if counts["fxrules"] != per_block:
        problems.append(f"each rule should fire once per block ({blocks} blocks): fxrules fired {counts['fxrules']}")
    for name, gm in (("fxrules", gm_fx), ("replace_pattern", gm_rp), ("inductor", gm_ind)):
        try:
            torch.testing.assert_close(gm(x), expected)
        except AssertionError as error:
            problems.append(f"{name} changed the output: {error}")
    for name, gm in (("replace_pattern", gm_rp), ("inductor", gm_ind)):
        try:
            torch.testing.assert_close(gm_fx(x), gm(x))
        except AssertionError as error:
            problems.append(f"fxrules and {name} give different outputs: {error}")
    for name, rules in (("nofire_tried", NOFIRE_TRIED), ("nofire_absent", NOFIRE_ABSENT)):
        gm = fresh(base)
        fired_counts = fxrules.apply(gm, rules).counts()
        if fired_counts:
            problems.append(f"the {name} ruleset fired: {fired_counts}")
        if gm.code != base.code:
            problems.append(f"the {name} ruleset fired nothing but changed the module")
    if problems:
        raise SystemExit(f"equivalence check failed on the {len(base.graph.nodes)}-node graph:\n  "
                         + "\n  ".join(problems))
    return {
        "nodes": len(base.graph.nodes), "blocks": blocks, "counts": counts["fxrules"],
        "nodes_after": {"fxrules": len(gm_fx.graph.nodes), "replace_pattern": len(gm_rp.graph.nodes),
                        "inductor": len(gm_ind.graph.nodes)},
    }


# ---------------------------------------------------------------------------- timing one size

TIMES = ("apply", "apply_total_seconds", "match_rewrite_report", "recompile", "apply_minus_recompile",
         "replace_pattern", "inductor", "bare_loop", "nofire_tried", "nofire_absent")


class Size:
    """One graph size: its traced module, the planned runs, and the times measured so far."""

    def __init__(self, size: int, runs: int, rp_runs: int) -> None:
        self.size = size
        self.base = trace(size)
        self.nodes = len(self.base.graph.nodes)
        self.runs = runs
        self.rp_runs = rp_runs
        self.times: dict[str, list[float]] = {k: [] for k in TIMES}
        self.fired: Counter[str] = Counter()
        self.pm_pass = make_inductor_pass(self.fired)

    def run_once(self) -> None:
        """One run of every contender but replace_pattern, each on a fresh copy."""
        times = self.times
        gm = fresh(self.base)
        seconds, report = timed(lambda: fxrules.apply(gm, RULESET))
        times["apply"].append(seconds)
        times["apply_total_seconds"].append(report.total_seconds)
        times["match_rewrite_report"].append(report.match_seconds + report.rewrite_seconds)
        # The same code generation apply ended with: the rewritten graph, recompiled again.
        recompile_seconds, _ = timed(gm.recompile)
        times["recompile"].append(recompile_seconds)
        times["apply_minus_recompile"].append(seconds - recompile_seconds)

        gm = fresh(self.base)
        seconds, _ = timed(lambda: run_inductor(gm, self.pm_pass, self.fired))
        times["inductor"].append(seconds)

        for key, rules in (("nofire_tried", NOFIRE_TRIED), ("nofire_absent", NOFIRE_ABSENT)):
            gm = fresh(self.base)
            seconds, report = timed(lambda gm=gm, rules=rules: fxrules.apply(gm, rules))
            if report.counts():
                raise SystemExit(f"the {key} ruleset fired on {self.nodes} nodes: {report.counts()}")
            times[key].append(seconds)

        # Timed as the no-fire applies are (a fresh copy, right after a collection), so the bar
        # compares like with like: run warm on a copy it just walked, the loop is 3-4x faster.
        gm = fresh(self.base)
        seconds, _ = timed(lambda: bare_loop(gm))
        times["bare_loop"].append(seconds)

    def run_replace_pattern(self) -> None:
        gm = fresh(self.base)
        seconds, _ = timed(lambda: run_replace_pattern(gm))
        self.times["replace_pattern"].append(seconds)

    def row(self) -> dict[str, Any]:
        medians = {k: statistics.median(v) for k, v in self.times.items() if v}
        return {"size": self.size, "nodes": self.nodes, "runs": self.runs, "replace_pattern_runs": self.rp_runs,
                "times": self.times, "median": medians}


def measure(plans: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """Time every (size, runs, replace_pattern runs): sizes interleaved run by run.

    Round r runs every size that still has runs left, so a change of load on the shared
    machine hits all sizes alike instead of skewing the slopes between them.
    """
    sizes = []
    for size, runs, rp_runs in plans:
        traced = time.perf_counter()
        sizes.append(Size(size, runs, rp_runs))
        print(f"  traced {sizes[-1].nodes} nodes in {time.perf_counter() - traced:.1f} s", flush=True)
    for kind in ("runs", "rp_runs"):
        for number in range(max(getattr(s, kind) for s in sizes)):
            started = time.perf_counter()
            due = [s for s in sizes if number < getattr(s, kind)]
            for s in due:
                s.run_once() if kind == "runs" else s.run_replace_pattern()
            what = "fxrules, inductor, no-fire, bare loop" if kind == "runs" else "replace_pattern"
            print(f"  {what}: round {number + 1} over {', '.join(str(s.nodes) for s in due)} nodes "
                  f"in {time.perf_counter() - started:.1f} s", flush=True)
    return [s.row() for s in sizes]


# ---------------------------------------------------------------------------- ratios, bars, printing

DEFAULT_SIZES = (1000, 5000, 20000, 50000)
QUICK_SIZES = (1000, 5000)
VERIFY_SIZE = 1000


def default_runs(size: int) -> tuple[int, int]:
    """(runs of every contender, runs of replace_pattern), fewer for big graphs.

    replace_pattern grows faster than linearly (about 90 s for one run at 50k nodes on
    two idle cores), so it runs once there: it only has to show the ratio's order.
    """
    if size <= 1000:
        return 9, 5
    if size <= 5000:
        return 5, 3
    if size <= 20000:
        return 3, 2
    return 3, 1


def slope(small: dict[str, Any], big: dict[str, Any], key: str) -> float:
    """log-log slope of a median time between two sizes: 1.0 is linear, 2.0 quadratic; nan when a median is
    not positive (at 1k nodes, ``apply - recompile`` is a few ms, and a noisy recompile can exceed it)."""
    small_time, big_time = small["median"][key], big["median"][key]
    if small_time <= 0 or big_time <= 0:
        return math.nan
    return math.log(big_time / small_time) / math.log(big["nodes"] / small["nodes"])


def ratios(row: dict[str, Any]) -> dict[str, float]:
    m = row["median"]
    return {
        "replace_pattern/apply": m["replace_pattern"] / m["apply"],
        "inductor/(apply-recompile)": m["inductor"] / m["apply_minus_recompile"],
        "inductor/(match+rewrite, report)": m["inductor"] / m["match_rewrite_report"],
        "nofire_tried/bare_loop": m["nofire_tried"] / m["bare_loop"],
        "nofire_absent/bare_loop": m["nofire_absent"] / m["bare_loop"],
        "recompile/apply": m["recompile"] / m["apply"],
    }


def bars(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's bars, each with the measured value and PASS/FAIL (None: size not measured)."""
    by_size = {row["size"]: row for row in rows}
    found = []

    def add(name: str, value: float | None, limit: str, ok: bool | None) -> None:
        found.append({"bar": name, "value": value, "limit": limit, "pass": ok})

    for size, need in ((20000, 10.0), (50000, 25.0)):
        row = by_size.get(size)
        value = ratios(row)["replace_pattern/apply"] if row else None
        add(f"{size // 1000}k: replace_pattern (9 calls) / apply", value, f">= {need:g}x",
            None if value is None else value >= need)
    for row in rows:
        value = row["median"]["apply_minus_recompile"] / row["median"]["inductor"]
        add(f"{row['nodes']} nodes: (apply - recompile) / inductor pass", value, "<= 0.5x", value <= 0.5)
    # Nothing to do: 10x; every anchor node of a common op to rule out (the architecture issue's bar): 20x.
    for key, label, need in (("nofire_absent", "anchors absent", 10), ("nofire_tried", "anchors present, all tried",
                                                                         20)):
        for row in rows:
            value = row["median"][key] / row["median"]["bare_loop"]
            add(f"{row['nodes']} nodes: no-fire apply ({label}) / bare loop", value, f"<= {need}x", value <= need)
    if 20000 in by_size and 50000 in by_size:
        value = slope(by_size[20000], by_size[50000], "apply")
        add("apply log-log slope 20k -> 50k", value, "<= 1.1", value <= 1.1)
    else:
        add("apply log-log slope 20k -> 50k", None, "<= 1.1", None)
    return found


COLUMNS = (
    ("apply", "apply"),
    ("apply_minus_recompile", "apply-recomp"),
    ("match_rewrite_report", "m+r(report)"),
    ("recompile", "recompile"),
    ("replace_pattern", "repl_pattern"),
    ("inductor", "inductor"),
    ("bare_loop", "bare_loop"),
    ("nofire_tried", "nofire_tried"),
    ("nofire_absent", "nofire_absent"),
)


def print_results(result: dict[str, Any]) -> None:
    rows = result["rows"]
    print()
    print("median wall times in ms (runs: every contender / replace_pattern)")
    header = f"{'nodes':>7} {'runs':>5} " + " ".join(f"{label:>13}" for _, label in COLUMNS)
    print(header)
    for row in rows:
        cells = " ".join(f"{row['median'][key] * 1000:13.3f}" for key, _ in COLUMNS)
        print(f"{row['nodes']:>7} {row['runs']:>2}/{row['replace_pattern_runs']:<2} {cells}")
    print()
    print("ratios")
    names = list(ratios(rows[0]))
    print(f"{'nodes':>7} " + " ".join(f"{n:>33}" for n in names))
    for row in rows:
        print(f"{row['nodes']:>7} " + " ".join(f"{v:33.2f}" for v in ratios(row).values()))
    if len(rows) > 1:
        print()
        print("log-log slopes between consecutive sizes (1.0 = linear)")
        keys = ("apply", "apply_minus_recompile", "recompile", "replace_pattern", "inductor", "nofire_tried")
        print(f"{'sizes':>15} " + " ".join(f"{k:>22}" for k in keys))
        for small, big in itertools.pairwise(rows):
            label = f"{small['nodes']}->{big['nodes']}"
            print(f"{label:>15} " + " ".join(_slope_cell(slope(small, big, k)) for k in keys))
    print()
    print("bars")
    for bar in result["bars"]:
        verdict = "n/a " if bar["pass"] is None else "PASS" if bar["pass"] else "FAIL"
        value = "not measured" if bar["value"] is None else f"{bar['value']:.3f}"
        print(f"  {verdict}  {bar['bar']}: {value} (need {bar['limit']})")


def _slope_cell(value: float) -> str:
    return f"{'n/a':>22}" if math.isnan(value) else f"{value:22.3f}"


def fxrules_version() -> str:
    """The commit of the fxrules checkout being measured (``+dirty`` with local changes), if known."""
    root = Path(fxrules.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "fxrules"], cwd=root, capture_output=True,
                               text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", help="comma-separated graph sizes in nodes (default 1000,5000,20000,50000)")
    parser.add_argument("--runs", type=int, help="runs per contender at every size (default: fewer for big sizes)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few runs: a smoke run")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    args = parser.parse_args(argv)
    if args.sizes:
        sizes = tuple(int(s) for s in args.sizes.split(",") if s.strip())
    else:
        sizes = QUICK_SIZES if args.quick else DEFAULT_SIZES
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")

    started = time.perf_counter()
    gc.collect()
    gc.freeze()  # torch's own objects: keep them out of the collections before each timed run
    version = fxrules_version()
    load_start = os.getloadavg()[0]
    print(f"fxrules {version} benchmark: python {platform.python_version()}, torch {torch.__version__}, "
          f"{platform.machine()}, threads {torch.get_num_threads()}, load average {load_start:.1f}")
    check = verify(VERIFY_SIZE)
    print(f"check on {check['nodes']} nodes ({check['blocks']} blocks): fxrules, replace_pattern and inductor "
          f"make the same replacements ({sum(check['counts'].values())}: each of the 9 rules once per block) "
          f"and give equal outputs; nodes after: {check['nodes_after']}")

    plans = []
    for size in sizes:
        runs, rp_runs = default_runs(size)
        if args.quick:
            runs, rp_runs = min(runs, 3), min(rp_runs, 2)
        if args.runs is not None:
            runs = rp_runs = args.runs
        plans.append((size, runs, rp_runs))
    rows = measure(plans)

    result = {
        "environment": {"fxrules": version, "python": platform.python_version(), "torch": torch.__version__,
                        "load_average": {"start": load_start, "end": os.getloadavg()[0]},
                        "machine": platform.machine(), "threads": torch.get_num_threads(),
                        "argv": sys.argv[1:]},
        "check": check, "rows": rows, "bars": bars(rows),
    }
    for row in rows:
        row["ratios"] = ratios(row)
    print_results(result)
    print(f"\ntotal {time.perf_counter() - started:.1f} s; load average {load_start:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end (2 cores: above 2, other processes shared them)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
