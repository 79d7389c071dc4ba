"""The ``fxrules`` command: check, list, apply and explain rule files.

``fxrules check FILE...``    diagnostics and a summary line per file; exit 1 on errors.
``fxrules list``             the bundled rulesets and their rules.
``fxrules apply RULES --model module:factory [--input-shape 2,3 ...] [--output F.py]``
                             trace the model, apply, print the report and a diff of the code.
``fxrules explain RULES --model module:factory``  the same, with near misses.
``--static-shapes`` (apply, explain): rules may specialize the graph to the ``--input-shape`` sizes.
``fxrules demo``             the bundled rulesets on three small models, measured.
``fxrules verify FILE... [--examples N] [--seed S] [--max-side N] [--dtypes D,D] [--rule NAME]
[--database DIR] [--json]``  check each rule's soundness; exit 1 if one is unsound or in error, 2 on a bad
                             option (the options are those of :func:`fxrules.verify`).

``fxrules prove FILE... [--rule NAME] [--timeout S] [--json]``  prove rules with the z3 solver (the extra
                             ``fxrules[prove]``); exit 1 if one is refuted, 2 on a bad option or without z3.

``fxrules fmt FILE... [--check] [--diff] [--line-length N]``  lay out rule files in the canonical layout
                             (:mod:`fxrules.formatting`); exit 1 if one does not parse, or with --check would change.

``fxrules convert module:pattern module:replacement [--name NAME]``  print the .fxr rule that
                             ``torch.fx.subgraph_rewriter.replace_pattern`` would apply for the two functions.

``--allow MODULE`` (check, apply, explain, verify, prove): a module the rules may name, as ``allow=`` does.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx

from fxrules.demo import run_demo
from fxrules.diagnostics import FxrError, FxrLoadError, FxrUsageError
from fxrules.engine.driver import apply
from fxrules.engine.loading import load
from fxrules.engine.report import counted
from fxrules.integrations.convert import rule_text
from fxrules.lang import bundled
from fxrules.lang.formatting import LINE_LENGTH, format_files
from fxrules.verification.options import (
    DEFAULT_EXAMPLES,
    DEFAULT_MAX_SIDE,
    DEFAULT_SEED,
    MAX_SIDE_LIMIT,
    parse_dtypes,
    whole_number_problem,
)
from fxrules.verification.prove import DEFAULT_TIMEOUT, prove
from fxrules.verification.soundness import verify


def _check(files: Sequence[str], allow: Sequence[str]) -> int:
    failed = False
    for name in files:
        try:
            ruleset = load(name, allow)
        except FxrLoadError as error:
            print(error, file=sys.stderr)
            print(f"{name}: {counted(len(error.diagnostics), 'error')}")
            failed = True
            continue
        except FxrError as error:
            print(f"{name}: error: {error}", file=sys.stderr)
            failed = True
            continue
        for warning in ruleset.warnings:
            print(warning.render(), file=sys.stderr)
        print(f"{name}: {counted(len(ruleset), 'rule')}, 0 errors")
    return 1 if failed else 0


def _list() -> int:
    for name in bundled.ruleset_names():
        ruleset = load(name)
        print(f"{name}: {len(ruleset)} rules")
        for rule in ruleset:
            summary = (rule.docstring or "").strip().splitlines()[0] if rule.docstring else ""
            print(f"  {rule.name:<30} {summary}")
    return 0


def _imported(spec: str, what: str, example: str) -> Any:
    """``package.module:attribute``, imported with the working directory on the path."""
    module_name, _, attribute = spec.partition(":")
    if not attribute:
        raise SystemExit(f"{what} must look like {example}, got {spec!r}")
    sys.path.insert(0, str(Path.cwd()))
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as error:  # ValueError: an empty module name
        raise SystemExit(f"fxrules: cannot load {what} {spec!r}: {error}") from None


def _factory(spec: str) -> Any:
    factory = _imported(spec, "--model", "package.module:factory")
    return factory() if callable(factory) and not isinstance(factory, torch.nn.Module) else factory


def _convert(args: argparse.Namespace) -> int:
    try:
        print(rule_text(_imported(args.pattern, "the pattern", "package.module:function"),
                        _imported(args.replacement, "the replacement", "package.module:function"), args.name), end="")
    except FxrError as error:
        print(f"fxrules convert: error: {error}", file=sys.stderr)
        return 1
    return 0


def _shapes(specs: Sequence[str]) -> list[torch.Tensor]:
    return [torch.randn(*(int(s) for s in spec.split(","))) for spec in specs]


def _apply(args: argparse.Namespace, explain: bool) -> int:
    model = _factory(args.model)
    model.eval()
    gm = model if isinstance(model, torch.fx.GraphModule) else torch.fx.symbolic_trace(model)
    before = gm.code
    inputs = _shapes(args.input_shape) if args.input_shape else None
    try:
        report = apply(gm, args.rules, example_inputs=inputs, allow=args.allow, explain=explain,
                       static_shapes=args.static_shapes)
    except FxrError as error:
        print(error, file=sys.stderr)
        return 1
    print(report)
    diff = difflib.unified_diff(before.splitlines(), gm.code.splitlines(), "before", "after", lineterm="")
    print("\n".join(diff))
    if args.output:
        Path(args.output).write_text(gm.code, encoding="utf-8")
    return 0


def _verify(args: argparse.Namespace) -> int:
    try:
        report = verify(list(args.files), max_examples=args.examples, seed=args.seed, max_side=args.max_side,
                        dtypes=args.dtypes, names=args.rule or None, database=args.database, allow=args.allow)
    except FxrUsageError as error:  # an option that does not fit the rules: --rule names no rule of them
        print(f"fxrules verify: error: {error}", file=sys.stderr)
        return 2
    except FxrError as error:
        print(error, file=sys.stderr)
        return 1
    print(report.to_json() if args.json else report)
    return 0 if report.sound else 1


def _prove(args: argparse.Namespace) -> int:
    try:
        report = prove(list(args.files), timeout=args.timeout, names=args.rule or None, allow=args.allow)
    except FxrUsageError as error:  # no z3, or --rule names no rule of the files
        print(f"fxrules prove: error: {error}", file=sys.stderr)
        return 2
    except FxrError as error:
        print(error, file=sys.stderr)
        return 1
    print(report.to_json() if args.json else report)
    return 0 if report.sound else 1


def _seconds(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return seconds


def _whole_number(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``, refused with the text the Python API gives."""
    def parse(text: str) -> int:
        problem = whole_number_problem(text, low, high)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return int(text)

    return parse


def _dtypes(text: str) -> tuple[Any, ...]:
    try:
        return parse_dtypes(text)
    except FxrUsageError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _verify_parser(check_rules: argparse.ArgumentParser) -> None:
    check_rules.add_argument("files", nargs="+", help=".fxr files or bundled ruleset names")
    check_rules.add_argument("--examples", type=_whole_number(1), default=DEFAULT_EXAMPLES, metavar="N",
                             help=f"hypothesis examples per rule (default {DEFAULT_EXAMPLES})")
    check_rules.add_argument("--seed", type=_whole_number(), default=DEFAULT_SEED, metavar="S",
                             help=f"the seed inputs are drawn from (default {DEFAULT_SEED}); another explores others")
    check_rules.add_argument("--max-side", type=_whole_number(1, MAX_SIDE_LIMIT), default=DEFAULT_MAX_SIDE,
                             metavar="N", help=f"the largest size of a drawn dim (default {DEFAULT_MAX_SIDE})")
    check_rules.add_argument("--dtypes", type=_dtypes, default=None, metavar="D,D",
                             help="draw tensors of these dtypes only, e.g. float32,int64")
    check_rules.add_argument("--rule", action="append", default=[], metavar="NAME",
                             help="verify only this rule (repeatable)")
    check_rules.add_argument("--database", default=None, metavar="DIR",
                             help="keep the failing inputs hypothesis finds in DIR and try them first next time "
                                  "(without it, verify writes no file)")
    check_rules.add_argument("--json", action="store_true", help="print the results as JSON")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fxrules", description="Declarative rewrite rules for torch.fx graphs.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="parse and check rule files")
    check.add_argument("files", nargs="+", help=".fxr files or bundled ruleset names")
    commands.add_parser("list", help="list the bundled rulesets and their rules")
    applying = []
    for name in ("apply", "explain"):
        command = commands.add_parser(name, help=f"{name} rules on a traced model")
        applying.append(command)
        command.add_argument("rules", help=".fxr file or bundled ruleset name")
        command.add_argument("--model", required=True, help="package.module:factory returning an nn.Module")
        command.add_argument("--input-shape", action="append", default=[], help="e.g. 2,3 (one per input)")
        command.add_argument("--output", help="write the rewritten code to this file")
        command.add_argument("--static-shapes", action="store_true",
                             help="let rules specialize the graph to the --input-shape sizes (static_shapes=True)")
    check_rules = commands.add_parser("verify", help="check that rules are sound on generated inputs")
    _verify_parser(check_rules)
    proving = commands.add_parser("prove", help="prove rules for every input with the z3 solver")
    proving.add_argument("files", nargs="+", help=".fxr files or bundled ruleset names")
    proving.add_argument("--rule", action="append", default=[], metavar="NAME",
                         help="prove only this rule (repeatable)")
    proving.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                         help=f"solver seconds per rule (default {DEFAULT_TIMEOUT:g})")
    proving.add_argument("--json", action="store_true", help="print the results as JSON")
    commands.add_parser("demo", help="apply the bundled rulesets to three small models and measure")
    convert = commands.add_parser("convert", help="print the .fxr rule of a replace_pattern(pattern, replacement)")
    convert.add_argument("pattern", help="package.module:function (or nn.Module, GraphModule) of the pattern")
    convert.add_argument("replacement", help="package.module:function of the replacement")
    convert.add_argument("--name", default="converted", help="the rule's name (default converted)")
    fmt = commands.add_parser("fmt", help="lay out rule files in the canonical layout")
    fmt.add_argument("files", nargs="+", help=".fxr files, rewritten in place ('-': standard input to output)")
    fmt.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    fmt.add_argument("--diff", action="store_true", help="write nothing; print how each file would change")
    fmt.add_argument("--line-length", type=_whole_number(20), default=LINE_LENGTH, metavar="N",
                     help=f"the longest line aimed for (default {LINE_LENGTH})")
    for command in (check, *applying, check_rules, proving):
        command.add_argument("--allow", action="append", default=[], metavar="MODULE",
                             help="a module the rules may name besides torch, operator and math (repeatable)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        run_demo()
        return 0
    if args.command == "verify":
        return _verify(args)
    if args.command == "prove":
        return _prove(args)
    if args.command == "convert":
        return _convert(args)
    if args.command == "fmt":
        return format_files(args.files, check=args.check, diff=args.diff, line_length=args.line_length)
    if args.command == "check":
        return _check(args.files, args.allow)
    if args.command == "list":
        return _list()
    return _apply(args, explain=args.command == "explain")


if __name__ == "__main__":
    raise SystemExit(main())
