"""Load and start-up time: ``fxrules.load`` of a generated 500-rule file, ``fxrules check``, ``import fxrules``.

The rule file is generated (``rule_file(n)``): it cycles through the forms the bundled rulesets and
docs/language.md use, renamed and filled in with different operations, so no two rules are alike:

* one-line rules (``relu(relu(x)) => relu(x)``), with a ``where`` guard on some;
* block rules with ``given:`` types (dtype alternatives, symbolic dims, module classes ``[exact]``),
  ``pattern:``/``where:``/``replace:`` sections, docstrings and decorators (``@tolerance``,
  ``@finite_inputs``);
* alternatives (``mul(x, 1) | mul(x, 1.0)``, two orders of a transpose pair), named interior nodes
  (``y = matmul(a, w)``), repeated captures, ``...`` for the rest of the arguments, literals;
* the prelude's families and a new ``family`` every 25 rules (function, method and aten spellings of an
  operation), used by the rules after it; a ``commutative`` declaration;
* helpers (``@fold_conv_bn``), guard functions (``inverse_permutation``) and literal folding
  (``a + b`` of two ``Scalar`` captures).

The operations are drawn in turn from about thirty unary and a dozen binary ones, so rules anchor on many
different targets and the load-time loop check has realistic work (a few rules anchor where others'
replacements do).

Each bar is measured in fresh processes, the median of ``--runs`` (at least 5), interleaved so a change of
machine load hits every contender alike:

* **load**: in a process that has imported torch and fxrules, the time of ``fxrules.load(path)`` on the
  500-rule file (parsing, resolving, the loop check and every import they trigger); bar 0.5 s.
* **check**: the wall time of ``python -m fxrules.cli check`` on a 10-rule file (generated the same way)
  minus that of ``python -c "import torch"``; bar 0.5 s.
* **import**: the wall time of ``python -c "import torch, fxrules"`` minus that of
  ``python -c "import torch"``; bar 0.3 s.

Each time is taken on two clocks: wall time (what the bars are about) and CPU time (user + system), which
a shared machine disturbs far less; both are printed, each with PASS/FAIL.

The subprocesses import the same fxrules as this script (its directory is put first on ``PYTHONPATH``),
from compiled bytecode as an installed package is (``PYTHONDONTWRITEBYTECODE`` is dropped, and an untimed
first round writes it).
The exit status is 0 whether or not the bars pass: it is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import fxrules

#: Unary operations: a prelude family's name, or a dotted function with its method and aten spellings.
UNARY = ("relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "neg", "abs", "sqrt", "rsqrt", "erf",
         "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "floor", "ceil", "round", "trunc",
         "sign", "square", "reciprocal", "log1p", "expm1", "frac", "log2", "log10", "exp2", "digamma")
#: Unary operations that are prelude families (the others get families of their own, or torch.X).
PRELUDE_UNARY = frozenset(UNARY[:12])
#: Binary operations: prelude families and functions.
BINARY = ("add", "sub", "mul", "div", "torch.maximum", "torch.minimum", "torch.atan2", "torch.hypot",
          "torch.fmod", "remainder", "torch.fmax", "torch.fmin", "torch.copysign", "torch.xlogy")
FLOAT_DTYPES = "float16|bfloat16|float32|float64"


def _unary(i: int) -> str:
    name = UNARY[i % len(UNARY)]
    return name if name in PRELUDE_UNARY else f"torch.{name}"


def _binary(i: int) -> str:
    return BINARY[i % len(BINARY)]


def _short(target: str) -> str:
    return target.rsplit(".", 1)[-1]


def _idempotent(i: int) -> str:
    f, g = _unary(i), _unary(i + 7)
    return (f"rule {_short(f)}_{_short(g)}_{i}:\n"
            f'    """{_short(f)} of {_short(g)} of {_short(g)} is {_short(f)} of {_short(g)} (rule {i})."""\n'
            f"    {f}({g}({g}(x))) => {f}({g}(x))\n")


#: Binary operations with their identity element.
IDENTITIES = (("add", 0), ("sub", 0), ("mul", 1), ("div", 1), ("torch.pow", 1), ("torch.Tensor.add", 0))
DTYPES = (FLOAT_DTYPES, "float32|float64", "float16|bfloat16", "float32")


def _identity_with_dtype(i: int) -> str:
    op, k = IDENTITIES[i % len(IDENTITIES)]
    return (f"rule {_short(op)}_identity_{i}:\n"
            f'    """{_short(op)}(x, {k}) is x here (a float x)."""\n'
            "    given:\n"
            f"        x: Tensor[dtype={DTYPES[i % len(DTYPES)]}]\n"
            "    pattern:\n"
            f"        return {op}(x, {k}) | {op}(x, {k}.0)\n"
            "    replace:\n"
            "        return x\n")


def _transpose_pair(i: int) -> str:
    f = _unary(i + 3)
    return (f"rule transpose_{_short(f)}_{i}:\n"
            f'    """Transposing around {_short(f)} twice is {_short(f)} (rule {i})."""\n'
            f"    transpose({f}(transpose(x, a, b)), a, b) | transpose({f}(transpose(x, a, b)), b, a) => {f}(x)\n")


def _permute_guard(i: int) -> str:
    f = _unary(i + 5)
    return (f"rule permute_{_short(f)}_{i}:\n"
            '    """A permute followed by its inverse, around an elementwise operation."""\n'
            "    pattern:\n"
            f"        return permute({f}(permute(x, p)), q)\n"
            "    where:\n"
            "        len(p) == len(q) and list(q) == inverse_permutation(p)\n"
            "    replace:\n"
            f"        return {f}(x)\n")


def _named_interior(i: int) -> str:
    f = _unary(i + 11)
    return ("@tolerance(atol=1e-5, rtol=1e-4)\n"
            "@finite_inputs()\n"
            f"rule addmm_{_short(f)}_{i}:\n"
            f'    """{_short(f)} of a 2-D matmul plus a bias is {_short(f)} of addmm."""\n'
            "    given:\n"
            "        a: Tensor[M, K, dtype=float32|float64]\n"
            "        w: Tensor[K, N]\n"
            "        b: Tensor[N]\n"
            "    pattern:\n"
            "        y = matmul(a, w)\n"
            f"        return {f}(add(y, b))\n"
            "    where:\n"
            f"        b.dtype == a.dtype and N % {1 + i % 8} == 0\n"
            "    replace:\n"
            f"        return {f}(torch.addmm(b, a, w))\n")


def _module_fold(i: int) -> str:
    dims = 1 + i % 3
    act = ("relu", "gelu", "silu", "tanh", "sigmoid")[i % 5]
    return ("@tolerance(atol=1e-5, rtol=1e-4)\n"
            "@finite_inputs()\n"
            f"rule fold_conv{dims}d_bn_{act}_{i}:\n"
            f'    """Conv{dims}d, eval-mode BatchNorm{dims}d, then {act}: one Conv{dims}d, then {act}."""\n'
            "    given:\n"
            f"        c: nn.Conv{dims}d[exact]\n"
            f"        bn: nn.BatchNorm{dims}d[exact]\n"
            "    pattern:\n"
            f"        return {act}(bn(c(x)))\n"
            "    where:\n"
            "        not bn.training and bn.track_running_stats and not c.training\n"
            "    replace:\n"
            f"        return {act}(@fold_conv_bn(c, bn)(x))\n")


def _scalar_fold(i: int) -> str:
    op, symbol = (("add", "+"), ("sub", "-"), ("mul", "*"), ("floordiv", "//"), ("mod", "%"))[i % 5]
    return (f"rule fold_{op}_{i}:\n"
            f'    """a {symbol} b of two literal numbers is its value."""\n'
            "    given:\n"
            "        a: Scalar\n"
            "        b: Scalar\n"
            "    pattern:\n"
            f"        return operator.{op}(operator.{op}(a, b), {i})\n"
            "    where:\n"
            f"        b != 0 and a < {1000 + i}\n"
            "    replace:\n"
            f"        return (a {symbol} b) {symbol} {i}\n")


def _dtype_guard(i: int) -> str:
    f = _unary(i + 13)
    return (f"rule to_same_dtype_{_short(f)}_{i}:\n"
            f'    """{_short(f)}(x).to(d) when the result already has dtype d is {_short(f)}(x)."""\n'
            "    given:\n"
            "        d: dtype\n"
            "    pattern:\n"
            f"        y = {f}(x)\n"
            "        return y.to(d)\n"
            "    where:\n"
            "        y.dtype == d\n"
            "    replace:\n"
            "        return y\n")


def _rest_arguments(i: int) -> str:
    f = _unary(i + 17)
    return (f"rule cat_single_{_short(f)}_{i}:\n"
            f'    """Concatenating one {_short(f)} is that {_short(f)}."""\n'
            f"    cat([{f}(x)], ...) => {f}(x)\n")


#: A binary operation of a value with itself, and what it is (``{y}``: the value).
SELF_OPERATIONS = (("add", "mul({y}, 2)"), ("mul", "torch.square({y})"), ("torch.maximum", "{y}"),
                   ("torch.minimum", "{y}"), ("torch.fmax", "{y}"), ("torch.hypot", "mul(abs({y}), math.sqrt(2))"))


def _shaped_guard(i: int) -> str:
    f = _unary(i + 19)
    op, result = SELF_OPERATIONS[i % len(SELF_OPERATIONS)]
    return (f"rule shaped_{_short(op)}_{_short(f)}_{i}:\n"
            f'    """{_short(op)} of x with {_short(f)} of itself, for small static shapes (rule {i})."""\n'
            "    given:\n"
            f"        x: Tensor[B, C, dtype={FLOAT_DTYPES}]\n"
            "    pattern:\n"
            f"        return {op}({f}(x), {f}(x))\n"
            "    where:\n"
            f"        C % {2 + i % 6} == 0 and x.numel() < 2 ** 20 and x.size(-1) == C\n"
            "    replace:\n"
            f"        return {result.format(y=f'{f}(x)')}\n")


FORMS: tuple[Callable[[int], str], ...] = (
    _idempotent, _identity_with_dtype, _transpose_pair, _permute_guard, _named_interior, _module_fold,
    _scalar_fold, _dtype_guard, _rest_arguments, _shaped_guard)


def _family(i: int) -> tuple[str, str]:
    """A new family of a unary operation's spellings, and its name."""
    base = UNARY[12 + (i // 25) % (len(UNARY) - 12)]
    name = f"{base}_family_{i}"
    return name, f"family {name} = torch.{base} | torch.Tensor.{base} | aten.{base}.default\n"


def _with_family(i: int, family: str) -> str:
    g = _unary(i + 23)
    return (f"rule {family}_of_{_short(g)}_{i}:\n"
            f'    """{family} of {_short(g)}, spelled any way, is computed the other way round (rule {i})."""\n'
            f"    {family}({g}(x)) => {g}({family}(x)) where x.dtype == torch.float32\n")


def rule_file(count: int) -> str:
    """A rule file of ``count`` varied rules (the module docstring says how they are made)."""
    parts = ["# Generated by benchmarks/bench_load.py: varied rules in the forms of the bundled rulesets.\n",
             "commutative torch.maximum, torch.minimum\n"]
    family = ""
    for i in range(count):
        if i % 25 == 0:
            family, definition = _family(i)
            parts.append(definition)
        parts.append(_with_family(i, family) if i % 11 == 10 else FORMS[i % len(FORMS)](i))
    return "\n".join(parts)


#: A measurement: wall time and CPU time (user + system), in seconds.
Seconds = tuple[float, float]


def _run(argv: Sequence[str], env: dict[str, str]) -> tuple[Seconds, str]:
    """Run a fresh process: its wall and CPU time (CPU time is far less disturbed by other processes on a
    shared machine), and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return (wall, cpu), done.stdout


def _timed_inside(code: str, env: dict[str, str]) -> Seconds:
    """The wall and CPU time that ``code`` prints (two numbers on its last line), run in a fresh process."""
    _, printed = _run([sys.executable, "-c", code], env)
    wall, cpu = printed.split("\n")[-2].split()
    return float(wall), float(cpu)


def measure(big: Path, small: Path, runs: int) -> dict[str, list[Seconds]]:
    """Every contender ``runs`` times in fresh processes, interleaved."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(fxrules.__file__).parent.parent), env.get("PYTHONPATH", "")])
    load_code = ("import time, warnings, torch, fxrules\nwarnings.simplefilter('ignore')\n"
                 "wall, cpu = time.perf_counter(), time.process_time()\n"
                 f"fxrules.load({str(big)!r})\nprint(time.perf_counter() - wall, time.process_time() - cpu)")
    contenders: dict[str, Callable[[], Seconds]] = {
        "load": lambda: _timed_inside(load_code, env),
        "check": lambda: _run([sys.executable, "-m", "fxrules.cli", "check", str(small)], env)[0],
        "import torch, fxrules": lambda: _run([sys.executable, "-c", "import torch, fxrules"], env)[0],
        "import torch": lambda: _run([sys.executable, "-c", "import torch"], env)[0],
    }
    for run in contenders.values():  # untimed: writes the bytecode an installed package has
        run()
    times: dict[str, list[Seconds]] = {name: [] for name in contenders}
    for _ in range(runs):
        for name, run in contenders.items():
            times[name].append(run())
    return times


def bars(medians: dict[str, float], clock: str) -> list[dict[str, object]]:
    """The issue's three bars on one clock (``wall`` or ``cpu``), each with its value and whether it passes."""
    torch_alone = medians["import torch"]
    measured = [("load of the 500-rule file (s)", medians["load"], 0.5),
                ("fxrules check (10 rules) minus import torch (s)", medians["check"] - torch_alone, 0.5),
                ("import fxrules minus import torch (s)", medians["import torch, fxrules"] - torch_alone, 0.3)]
    return [{"bar": name, "clock": clock, "value": round(value, 3), "limit": limit, "pass": value <= limit}
            for name, value, limit in measured]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", type=int, default=500, help="rules in the file fxrules.load reads (default 500)")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per contender (default 5)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    parser.add_argument("--write", metavar="FILE", help="only write the generated rule file to FILE and exit")
    args = parser.parse_args(argv)
    if args.write:
        Path(args.write).write_text(rule_file(args.rules), encoding="utf-8")
        return 0
    with tempfile.TemporaryDirectory() as folder:
        big, small = Path(folder, "rules500.fxr"), Path(folder, "rules10.fxr")
        big.write_text(rule_file(args.rules), encoding="utf-8")
        small.write_text(rule_file(10), encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fxrules.FxrLoopWarning)  # counted below
            loaded = fxrules.load(big)  # a broken generator fails here, before anything is timed
        times = measure(big, small, args.runs)
    medians = {clock: {name: statistics.median(run[index] for run in values) for name, values in times.items()}
               for index, clock in enumerate(("wall", "cpu"))}
    print(f"{len(loaded)} rules, {len(loaded.warnings)} warnings; medians of {args.runs} fresh processes (s), "
          f"load average {os.getloadavg()[0]:.1f}:")
    print(f"  {'':<24} {'wall':>7} {'cpu':>7}")
    for name in times:
        print(f"  {name:<24} {medians['wall'][name]:7.3f} {medians['cpu'][name]:7.3f}")
    results = [*bars(medians["wall"], "wall"), *bars(medians["cpu"], "cpu")]
    for bar in results:
        print(f"{'PASS' if bar['pass'] else 'FAIL'}  {bar['bar']}, {bar['clock']}: {bar['value']:.3f} "
              f"(bar {bar['limit']})")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rules": len(loaded), "runs": args.runs, "times": times, "medians": medians,
                       "bars": results, "torch": __import__("torch").__version__,
                       "load_average": os.getloadavg()}, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
