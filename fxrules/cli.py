"""The ``fxrules`` command: check, list, apply, explain and verify rule files (docs/cli.md is the guide).

``fxrules check FILE...``    diagnostics and a summary line per file; exit 1 on errors.
``fxrules list``             the bundled rulesets and their rules, each with the first sentence of its docstring.
``fxrules apply RULES... --model module:factory [--input 'int64[2,16]:0..1000' ...] [--trace symbolic|export|dynamo]
[--output model.pt2|code.py|FOLDER]``
                             trace the model, apply, print the report and a diff of the code, save the result.
``fxrules explain RULES... --model module:factory``  the same, with near misses.
``--static-shapes`` (apply, explain): rules may specialize the graph to the ``--input`` sizes.
``fxrules demo``             the bundled rulesets on three small models, measured.
``fxrules verify FILE... [--examples N] [--seed S] [--max-side N] [--dtypes D,D] [--database DIR] [--no-prove]
[--prove-timeout S] [--json]``
                             check each rule's soundness, with a proof where z3 finds one; exit 1 if one is
                             unsound or in error (the options are those of :func:`fxrules.verify`).

``fxrules prove FILE... [--rule NAME] [--timeout S] [--json]``  prove rules with the z3 solver (the extra
                             ``fxrules[prove]``); exit 1 if one is refuted, 2 on a bad option or without z3.
``fxrules fmt FILE... [--check] [--diff] [--line-length N]``  lay out rule files in the canonical layout
                             (:mod:`fxrules.lang.formatting`); exit 1 if one does not parse, or with --check would
                             change.
``fxrules convert module:pattern module:replacement [--name NAME]``  print the .fxr rule that
                             ``torch.fx.subgraph_rewriter.replace_pattern`` would apply for the two functions.

``--allow MODULE`` (check, apply, explain, verify, prove): a module the rules may name, as ``allow=`` does.
``--rule NAME``, ``--exclude NAME`` (apply, explain, verify): choose rules by name or glob pattern.
``--helpers MODULE`` (apply, explain, verify): a module whose ``HELPERS`` and ``PREDICATES`` mappings are
passed as ``helpers=`` and ``predicates=``.
``--verbose`` (apply, explain): the notes on bundled rules too.

A mistake on the command line is one line on stderr and exit code 2; an error in a rule file or a failing
apply is exit code 1.  Each warning of the rule files is printed once.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import attrs

from fxrules.diagnostics import FxrError, FxrLoadError, FxrLoopWarning, FxrUsageError
from fxrules.lang import bundled

# Each command imports what it runs, and adds its arguments only when it is the one run (their defaults
# live with the code that uses them): `check`, `list` and `fmt` do not pay for the rewriter's driver,
# verification (hypothesis), Dynamo or the model tools.
if TYPE_CHECKING:
    import torch

    from fxrules.engine.report import Report
    from fxrules.integrations import driving
    from fxrules.lang.ir import RuleSet


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (argparse prints the usage first) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _print_warnings(rulesets: Iterable[RuleSet], printed: set[str]) -> None:
    """Each warning of the rule files once, however many of the files include the file it is about."""
    for ruleset in rulesets:
        for warning in ruleset.warnings:
            text = warning.render()
            if text not in printed:
                printed.add(text)
                print(text, file=sys.stderr)


def _check(files: Sequence[str], allow: Sequence[str]) -> int:
    from fxrules.engine.loading import load
    from fxrules.engine.report import counted

    failed = False
    printed: set[str] = set()
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
        _print_warnings([ruleset], printed)
        print(f"{name}: {counted(len(ruleset), 'rule')}, 0 errors")
    return 1 if failed else 0


_SENTENCE = re.compile(r"(.+?[.!?])(?=\s+[A-Z(]|$)")


def first_sentence(docstring: str | None) -> str:
    """The first sentence of a docstring, whole, on one line (its first paragraph if it has no full stop)."""
    paragraph = " ".join((docstring or "").strip().split("\n\n")[0].split())
    found = _SENTENCE.match(paragraph)
    return found.group(1) if found else paragraph


def _list() -> int:
    from fxrules.engine.loading import load

    for name in bundled.ruleset_names():
        ruleset = load(name)
        print(f"{name}: {len(ruleset)} rules")
        for rule in ruleset:
            print(f"  {rule.name:<30} {first_sentence(rule.docstring)}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from fxrules.integrations import driving
    from fxrules.integrations.convert import rule_text

    pattern = driving.import_object(args.pattern, "the pattern")
    replacement = driving.import_object(args.replacement, "the replacement")
    print(rule_text(pattern, replacement, args.name), end="")
    return 0


def _rules(args: argparse.Namespace, files: Sequence[str]) -> RuleSet:
    """The rules of ``files``, those ``--rule``/``--exclude`` choose, each file's warnings printed once."""
    from fxrules.engine.driver import load_rules

    loaded = [load_rules(name, args.allow) for name in files]
    _print_warnings(loaded, set())
    return load_rules(loaded).select(args.rule or None, args.exclude or None, labels=("--rule", "--exclude"))


def _inputs(args: argparse.Namespace) -> list[torch.Tensor]:
    from fxrules.integrations import driving

    specs = [*(driving.input_shape_spec(shape) for shape in args.input_shape), *args.input]
    return driving.example_inputs(specs)


def _apply(args: argparse.Namespace, explain: bool) -> int:
    from torch.export import ExportedProgram

    from fxrules.engine.driver import apply, apply_program
    from fxrules.integrations import driving

    ruleset = _rules(args, args.rules)
    helpers, predicates = driving.user_functions(args.helpers)
    inputs = _inputs(args)
    output = driving.output_path(args.output, args.trace, inputs)
    traced = driving.trace(driving.build_model(args.model), args.trace, inputs)
    driving.check_input_count(traced, inputs)
    before = driving.code_of(traced)
    options: dict[str, Any] = {"helpers": helpers, "predicates": predicates, "explain": explain,
                               "static_shapes": args.static_shapes}
    result: driving.Traced
    if isinstance(traced, ExportedProgram):
        rewritten = apply_program(traced, ruleset, **options)
        result, report = rewritten.program, rewritten.report
    else:
        result, report = traced, apply(traced, ruleset, example_inputs=inputs or None, **options)
    print(report if args.verbose else _without_bundled_notes(report))
    after = driving.code_of(result)
    print("\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm="")))
    if output is not None:
        _save(result, output, inputs)
    return 0


def _save(result: driving.Traced, path: Path, inputs: Sequence[torch.Tensor]) -> None:
    from fxrules.integrations import driving

    if path.suffix == ".py":  # the code to read (not loadable without the module's weights: see .pt2)
        path.write_text(driving.code_of(result), encoding="utf-8")
        return
    driving.save(result, path, inputs)
    print(f"saved {'the exported program' if path.suffix == '.pt2' else 'the graph module'} to {path}")


def _without_bundled_notes(report: Report) -> Report:
    """The report without the notes on bundled rules (how their arguments are compared): the user cannot act
    on them.  ``--verbose`` shows them."""
    bundled_files = {f"rulesets/{name}" for name in [*bundled.ruleset_names(), bundled.PRELUDE]}
    rules = tuple(attrs.evolve(rule, notes=()) if rule.location.rsplit(":", 2)[0] in bundled_files else rule
                  for rule in report.rules)
    return attrs.evolve(report, rules=rules)


def _verify(args: argparse.Namespace) -> int:
    from fxrules.integrations import driving
    from fxrules.verification.soundness import verify

    ruleset = _rules(args, args.files)
    helpers, predicates = driving.user_functions(args.helpers)
    report = verify(ruleset, max_examples=args.examples, seed=args.seed, max_side=args.max_side, dtypes=args.dtypes,
                    database=args.database, helpers=helpers, predicates=predicates, prove=args.prove,
                    prove_timeout=args.prove_timeout)
    print(report.to_json() if args.json else report)
    return 0 if report.sound else 1


def _prove(args: argparse.Namespace) -> int:
    from fxrules.verification.prove import prove

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
        from fxrules.verification.options import whole_number_problem

        problem = whole_number_problem(text, low, high)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return int(text)

    return parse


def _dtypes(text: str) -> tuple[Any, ...]:
    from fxrules.verification.options import parse_dtypes

    try:
        return parse_dtypes(text)
    except FxrUsageError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _verify_parser(check_rules: argparse.ArgumentParser) -> None:
    from fxrules.verification.options import DEFAULT_EXAMPLES, DEFAULT_MAX_SIDE, DEFAULT_SEED, MAX_SIDE_LIMIT
    from fxrules.verification.prove import DEFAULT_TIMEOUT

    check_rules.add_argument("files", nargs="+", help=".fxr files or bundled ruleset names")
    check_rules.add_argument("--examples", type=_whole_number(1), default=DEFAULT_EXAMPLES, metavar="N",
                             help=f"hypothesis examples per rule (default {DEFAULT_EXAMPLES})")
    check_rules.add_argument("--seed", type=_whole_number(), default=DEFAULT_SEED, metavar="S",
                             help=f"the seed inputs are drawn from (default {DEFAULT_SEED}); another explores others")
    check_rules.add_argument("--max-side", type=_whole_number(1, MAX_SIDE_LIMIT), default=DEFAULT_MAX_SIDE,
                             metavar="N", help=f"the largest size of a drawn dim (default {DEFAULT_MAX_SIDE})")
    check_rules.add_argument("--dtypes", type=_dtypes, default=None, metavar="D,D",
                             help="draw tensors of these dtypes only, e.g. float32,int64")
    check_rules.add_argument("--database", default=None, metavar="DIR",
                             help="keep the failing inputs hypothesis finds in DIR and try them first next time "
                                  "(without it, verify writes no file)")
    check_rules.add_argument("--no-prove", dest="prove", action="store_false",
                             help="only sample: do not give the rules to the z3 prover first (without z3 installed, "
                                  "verify only samples anyway)")
    check_rules.add_argument("--prove-timeout", type=_seconds, default=None, metavar="S",
                             help=f"solver seconds per rule when proving (default {DEFAULT_TIMEOUT:g}, as prove's "
                                  "--timeout)")
    check_rules.add_argument("--json", action="store_true", help="print the results as JSON")


def _apply_parser(command: argparse.ArgumentParser) -> None:
    from fxrules.integrations import driving

    command.add_argument("rules", nargs="+", help=".fxr files or bundled ruleset names")
    command.add_argument("--model", required=True, help="package.module:factory returning an nn.Module")
    command.add_argument("--input", action="append", default=[], metavar="SPEC",
                         help="one model input, e.g. 'int64[2,16]:0..1000' or 'float32[4,3]' (repeatable)")
    command.add_argument("--input-shape", action="append", default=[], metavar="2,3",
                         help="a float32 input of these sizes (--input 'float32[2,3]')")
    command.add_argument("--trace", choices=driving.TRACES, default="symbolic",
                         help="how the model becomes a graph: torch.fx.symbolic_trace (default), torch.export "
                              "(aten level) or Dynamo (torch level, as torch.compile sees it)")
    command.add_argument("--output", metavar="PATH",
                         help="save the result: a .pt2 ExportedProgram (torch.export.load reads it), a folder "
                              "that imports (GraphModule.to_folder), or the code alone (.py); any --trace")
    command.add_argument("--static-shapes", action="store_true",
                         help="let rules specialize the graph to the --input sizes (static_shapes=True)")
    command.add_argument("--verbose", action="store_true", help="also print the notes on bundled rules")


def _choosing(command: argparse.ArgumentParser) -> None:
    command.add_argument("--rule", action="append", default=[], metavar="NAME",
                         help="only this rule; a name or a glob pattern such as 'fold_*' (repeatable)")
    command.add_argument("--exclude", action="append", default=[], metavar="NAME",
                         help="not this rule; a name or a glob pattern (repeatable)")
    command.add_argument("--helpers", action="append", default=[], metavar="MODULE",
                         help="a module with HELPERS and/or PREDICATES mappings for the rules (repeatable)")


def _files(command: argparse.ArgumentParser) -> None:
    command.add_argument("files", nargs="+", help=".fxr files or bundled ruleset names")


def _allowing(command: argparse.ArgumentParser) -> None:
    command.add_argument("--allow", action="append", default=[], metavar="MODULE",
                         help="a module the rules may name besides torch, operator and math (repeatable)")


def _check_parser(command: argparse.ArgumentParser) -> None:
    _files(command)
    _allowing(command)


def _applying_parser(command: argparse.ArgumentParser) -> None:
    _apply_parser(command)
    _allowing(command)
    _choosing(command)


def _verifying_parser(command: argparse.ArgumentParser) -> None:
    _verify_parser(command)
    _allowing(command)
    _choosing(command)


def _prove_parser(command: argparse.ArgumentParser) -> None:
    from fxrules.verification.prove import DEFAULT_TIMEOUT

    _files(command)
    command.add_argument("--rule", action="append", default=[], metavar="NAME",
                         help="prove only this rule (repeatable)")
    command.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                         help=f"solver seconds per rule (default {DEFAULT_TIMEOUT:g})")
    command.add_argument("--json", action="store_true", help="print the results as JSON")
    _allowing(command)


def _convert_parser(command: argparse.ArgumentParser) -> None:
    command.add_argument("pattern", help="package.module:function (or nn.Module, GraphModule) of the pattern")
    command.add_argument("replacement", help="package.module:function of the replacement")
    command.add_argument("--name", default="converted", help="the rule's name (default converted)")


def _fmt_parser(command: argparse.ArgumentParser) -> None:
    from fxrules.lang.formatting import LINE_LENGTH

    command.add_argument("files", nargs="+", help=".fxr files, rewritten in place ('-': standard input to output)")
    command.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    command.add_argument("--diff", action="store_true", help="write nothing; print how each file would change")
    command.add_argument("--line-length", type=_whole_number(20), default=LINE_LENGTH, metavar="N",
                         help=f"the longest line aimed for (default {LINE_LENGTH})")


#: Each command: its help line, and what adds its arguments.
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None] | None]] = {
    "check": ("parse and check rule files", _check_parser),
    "list": ("list the bundled rulesets and their rules", None),
    "apply": ("apply rules on a traced model", _applying_parser),
    "explain": ("explain rules on a traced model", _applying_parser),
    "verify": ("check that rules are sound on generated inputs", _verifying_parser),
    "prove": ("prove rules for every input with the z3 solver", _prove_parser),
    "demo": ("apply the bundled rulesets to three small models and measure", None),
    "convert": ("print the .fxr rule of a replace_pattern(pattern, replacement)", _convert_parser),
    "fmt": ("lay out rule files in the canonical layout", _fmt_parser),
}


def _parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The command line's parser; only the command ``argv`` names gets its arguments (the others' defaults
    would import what that command does not run).  The top level has no option but ``-h``, so the command
    is the first argument that is not an option."""
    chosen = next((argument for argument in argv if not argument.startswith("-")), None)
    parser = _Parser(prog="fxrules", description="Declarative rewrite rules for torch.fx graphs.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (help_line, add_arguments) in _COMMANDS.items():
        command = commands.add_parser(name, help=help_line)
        if add_arguments is not None and name == chosen:
            add_arguments(command)
    return parser


#: The commands that load rule files and print what they found.  They run with the garbage collector paused,
#: torch's import included: a collection scans every object alive, torch's hundreds of thousands among them,
#: and freed next to nothing here (a third of `check`'s time past torch's import); the few cycles these
#: commands leave are freed when the command ends.  Run as a program, the process ends with the command: what
#: it made is frozen then, or the first collection at exit would scan all of it (100 ms).
_LOADING = frozenset({"check", "list"})


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = _parser(arguments).parse_args(arguments)
    with warnings.catch_warnings(), _collector(args.command, ends_process=argv is None):
        warnings.simplefilter("ignore", FxrLoopWarning)  # printed once each by the commands, with the rest
        return _run(args)


@contextlib.contextmanager
def _collector(command: str, ends_process: bool) -> Iterator[None]:
    """The garbage collector paused for the commands of :data:`_LOADING`; as it is for the others."""
    if command not in _LOADING:
        yield
        return
    from fxrules.engine.loading import collector_paused

    with collector_paused():
        yield
        if ends_process:  # nothing of the program is left to collect: no need to scan what the command made
            gc.freeze()


def _run(args: argparse.Namespace) -> int:
    """Run the command; an fxrules error is one message (exit 2 for a usage mistake, 1 otherwise)."""
    try:
        if args.command == "demo":
            from fxrules.demo import run_demo

            run_demo()
            return 0
        if args.command == "verify":
            return _verify(args)
        if args.command == "prove":
            return _prove(args)
        if args.command == "convert":
            return _convert(args)
        if args.command == "fmt":
            from fxrules.lang.formatting import format_files

            return format_files(args.files, check=args.check, diff=args.diff, line_length=args.line_length)
        if args.command == "check":
            return _check(args.files, args.allow)
        if args.command == "list":
            return _list()
        return _apply(args, explain=args.command == "explain")
    except FxrUsageError as error:
        print(f"fxrules {args.command}: error: {error}", file=sys.stderr)
        return 2
    except FxrError as error:
        print(error, file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
