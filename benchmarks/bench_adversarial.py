"""Load and apply times of hostile rule files: the work fxrules does must stay bounded.

Run ``python benchmarks/bench_adversarial.py`` (every shape) or ``--case NAME`` (one); see
``benchmarks/README.md``.  Each shape runs in a child process with a time limit (``--timeout``,
default 10 s), so a shape that does not finish is reported as ``> N s`` instead of hanging the run.

Shapes (each a rule file and, for apply, a traced graph; see ``SHAPES``):

* ``huge_literal`` -- ``x.reshape(10 ** 10 ** 10)``: literal arithmetic at load time.
* ``squared_literal`` -- ``torch.mul(x, c) => torch.mul(x, c * c)`` with ``c: int``: a literal that
  doubles its size at every pass of ``apply``.
* ``commutative_repeats`` -- a 16-deep chain of ``b = b' + w`` under a false guard, on a graph of
  ``a = a' + a'`` (both operands the same node): 2^16 operand orders per anchor, all matching.
* ``alternative_stack`` -- 12 stacked ``(y * 2) | (2 * y)`` under a false guard, whose replacement is
  the chain itself (the load-time loop check matches it too): both options match at every level.
* ``alternative_bindings`` -- ``torch.cat([a1 | b1, ..., a16 | b16])`` under a false guard: 2^16
  structural matches that all bind differently.
* ``include_diamond`` -- 12 levels of files each including the two files of the next level, which
  both include the same file below them (timed only).
* ``many_rules`` -- 2,000 rules anchored at one target, each replacement calling it (timed only: the
  load-time loop check tries every rule at the replacement of every other).
"""

from __future__ import annotations

import argparse
import gc
import json
import operator
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.fx

import fxrules

COMMUTATIVE = 16  # levels of the commutative chain
DEPTH = 12  # levels of the alternative stack
BINDINGS = 16  # list items of alternative_bindings
DIAMOND = 12  # levels of the include diamond
MANY = 2000  # rules of many_rules


def commutative_repeats_rule() -> str:
    lines = ["rule commutative_repeats:", "    pattern:", "        b1 = v + w1"]
    lines += [f"        b{i} = b{i - 1} + w{i}" for i in range(2, COMMUTATIVE + 1)]
    lines += [f"        return b{COMMUTATIVE}", "    where:", "        v is None", "    replace:", "        return v"]
    return "\n".join(lines) + "\n"


def commutative_repeats_graph() -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    value = graph.placeholder("x")
    for _ in range(COMMUTATIVE + 1):
        value = graph.call_function(operator.add, (value, value))
    graph.output(value)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def alternative_stack_rule() -> str:
    chain = "x"
    lines = ["rule alternative_stack:", "    pattern:", "        y1 = (x * 2) | (2 * x)"]
    lines += [f"        y{i} = (y{i - 1} * 2) | (2 * y{i - 1})" for i in range(2, DEPTH + 1)]
    for _ in range(DEPTH):
        chain = f"({chain} * 2)"
    lines += [f"        return y{DEPTH}", "    where:", "        x is None", "    replace:", f"        return {chain}"]
    return "\n".join(lines) + "\n"


def mul_chain_graph() -> torch.fx.GraphModule:
    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(DEPTH + 2):
            x = x * 2
        return x

    return torch.fx.symbolic_trace(chain)


def alternative_bindings_rule() -> str:
    items = ", ".join(f"a{i} | b{i}" for i in range(BINDINGS))
    return f"rule alternative_bindings:\n    torch.cat([{items}]) => a0 where a0 is None\n"


def cat_graph() -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.cat, ([x] * BINDINGS,)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def squared_literal_rule() -> str:
    return ("rule squared_literal:\n    given:\n        c: int\n    pattern:\n        return torch.mul(x, c)\n"
            "    replace:\n        return torch.mul(x, c * c)\n")


def include_diamond(folder: Path) -> Path:
    """``d0.fxr`` includes ``a1`` and ``b1``, which both include ``d1``, ...: 2^DIAMOND paths to the last."""
    (folder / f"d{DIAMOND}.fxr").write_text("rule leaf:\n    torch.neg(torch.neg(x)) => x\n")
    for level in range(DIAMOND - 1, -1, -1):
        (folder / f"d{level}.fxr").write_text(f'include "a{level + 1}.fxr"\ninclude "b{level + 1}.fxr"\n')
        for side in "ab":
            (folder / f"{side}{level + 1}.fxr").write_text(f'include "d{level + 1}.fxr"\n')
    return folder / "d0.fxr"


def many_rules() -> str:
    return "".join(f"rule r{i}:\n    torch.add(torch.neg(x), {i}) => torch.add(x, {i})\n" for i in range(MANY))


def _timed(action: Callable[[], object]) -> tuple[float, object]:
    """Seconds ``action`` took, with the garbage collector off (as ``timeit`` does): a full collection
    over torch's objects takes a few tenths of a second, at random points."""
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        result = action()
        return time.perf_counter() - started, result
    finally:
        gc.enable()


def _outcome(report: fxrules.Report) -> str:
    reasons = sorted({reason for rule in report.rules for reason in rule.skip_counts})
    return f"fired {report.total_fired}, skipped: {', '.join(reasons) or 'none'}"


def _load_and_apply(text: str, make_graph: Callable[[], torch.fx.GraphModule] | None,
                    **apply_options: object) -> dict[str, object]:
    load, rules = _timed(lambda: _parse_or_error(text))
    if isinstance(rules, fxrules.FxrLoadError):
        return {"load": load, "apply": None, "outcome": f"load error: {rules.diagnostics[0].message}"}
    if make_graph is None:
        return {"load": load, "apply": None, "outcome": f"{len(list(rules))} rules"}
    gm = make_graph()
    apply, report = _timed(lambda: fxrules.apply(gm, rules, **apply_options))
    return {"load": load, "apply": apply, "outcome": _outcome(report)}  # type: ignore[arg-type]


def _parse_or_error(text: str) -> fxrules.RuleSet | fxrules.FxrLoadError:
    """The rules, or the load error (returned, so that the time to find it is measured)."""
    try:
        return fxrules.parse(text, "adversarial.fxr")
    except fxrules.FxrLoadError as error:
        return error


def _diamond() -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        root = include_diamond(Path(folder))
        load, rules = _timed(lambda: fxrules.load(root))
    return {"load": load, "apply": None, "outcome": f"{len(list(rules))} rule(s)"}  # type: ignore[arg-type]


SHAPES: dict[str, Callable[[], dict[str, object]]] = {
    "huge_literal": lambda: _load_and_apply("rule huge:\n    x.reshape(10 ** 10 ** 10) => x\n", None),
    "squared_literal": lambda: _load_and_apply(
        squared_literal_rule(), lambda: torch.fx.symbolic_trace(lambda x: torch.mul(x, 3)), max_passes=40),
    "commutative_repeats": lambda: _load_and_apply(commutative_repeats_rule(), commutative_repeats_graph),
    "alternative_stack": lambda: _load_and_apply(alternative_stack_rule(), mul_chain_graph),
    "alternative_bindings": lambda: _load_and_apply(alternative_bindings_rule(), cat_graph),
    "include_diamond": _diamond,
    "many_rules": lambda: _load_and_apply(many_rules(), None),
}


def _warm_up() -> None:
    """Parse and apply a plain rule first: the grammar, signatures and tracing machinery are built once per
    process, and would otherwise be timed as part of the first shape."""
    rules = fxrules.parse("rule warm:\n    torch.neg(torch.neg(x)) => x\n")
    fxrules.apply(torch.fx.symbolic_trace(lambda x: torch.neg(torch.neg(x))), rules)


def _run_in_child(name: str, timeout: float) -> dict[str, object]:
    """One shape in a child process: a shape that hangs (the bug this guards against) cannot hang the run."""
    try:
        done = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"load": None, "apply": None, "outcome": f"> {timeout:g} s (stopped)"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"load": None, "apply": None, "outcome": f"failed: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _seconds(value: object) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(SHAPES), help="run one shape here and print its result as JSON")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds each shape may take (default 10)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    options = parser.parse_args(argv)
    if options.case:
        _warm_up()
        print(json.dumps(SHAPES[options.case]()))
        return 0
    results = {name: _run_in_child(name, options.timeout) for name in SHAPES}
    print(f"{'shape':<22} {'load s':>8} {'apply s':>8}  outcome")
    for name, result in results.items():
        print(f"{name:<22} {_seconds(result['load']):>8} {_seconds(result['apply']):>8}  {result['outcome']}")
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
