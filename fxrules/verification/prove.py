"""Proofs of rules with an SMT solver (z3): for every input, not for drawn ones.

A rule whose operations are elementwise is translated, for one element per
tensor capture, into z3 terms: IEEE floating point for ``float16``,
``bfloat16``, ``float32`` and ``float64`` (a complex number is two of them),
bit-vectors for the integer dtypes, booleans for ``bool``.  The solver is asked
for an element on which the pattern and the replacement differ.  Each
*configuration* (a dtype for each tensor capture and each ``dtype`` capture,
and whether each tensor is 0-dim, which changes type promotion) is proved on
its own: the pattern and the replacement first run on one-element tensors of
that configuration, so torch itself says which configurations are in the
pattern's domain and which dtype each operation computes in; the solver
then decides the values.  A counterexample is replayed on real tensors through
the standalone graphs ``verify`` runs: only a difference torch reproduces is a
refutation, any other is a mismatch between the model and torch, reported as
such.

A ``float`` or ``int`` capture is a number the solver chooses (an IEEE double,
an int64), converted as torch converts a Python number; the guard's
comparisons of such numbers constrain them.  Transcendental functions are
uninterpreted, tied only by the axioms of :mod:`fxrules.verification.axioms`;
a difference that rests on their values is a refutation only when torch
reproduces it.

Outputs are equal when their dtypes are, their shapes are (each output is the
broadcast of a set of tensor captures: the two sets must be the same), and
their elements are (NaN equals NaN, ``-0.0`` differs from ``0.0``).  Gradients
and aliasing are not proved: ``verify`` checks those.
"""

from __future__ import annotations

import enum
import importlib
import itertools
import json
import math
import operator
import struct
import time
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import torch
import torch.fx

from fxrules.diagnostics import FxrError, FxrUsageError, did_you_mean
from fxrules.engine.driver import RulesArgument, load_rules
from fxrules.engine.report import counted
from fxrules.lang.ir import (
    Guard,
    GuardAttr,
    GuardBool,
    GuardCall,
    GuardCompare,
    GuardConst,
    GuardExpr,
    GuardName,
    GuardSeq,
    GuardUnary,
    HelperTemplate,
    ModuleType,
    Rule,
    RuleSet,
    ScalarType,
    TensorType,
    walk,
)
from fxrules.rewrite import helpers as bundled_helpers
from fxrules.rewrite.standalone import Standalone, alternative_choices, build, input_names, replacement_dims
from fxrules.verification.axioms import TRANSCENDENTALS, Applications
from fxrules.verification.options import DTYPES
from fxrules.verification.soundness import compare, reproduction
from fxrules.verification.strategies import ALL_DTYPES, Example, capture_roles, guard_allows

#: Seconds of solver time a rule may take, over all its configurations.
DEFAULT_TIMEOUT = 5.0
INSTALL_HINT = "fxrules prove needs the z3 solver: pip install fxrules[prove]"

#: (exponent bits, significand bits) of each floating dtype, as z3's FPSort takes them.
FLOAT_SORTS: Mapping[torch.dtype, tuple[int, int]] = {
    torch.float16: (5, 11), torch.bfloat16: (8, 8), torch.float32: (8, 24), torch.float64: (11, 53),
}
INTEGER_BITS: Mapping[torch.dtype, int] = {
    torch.uint8: 8, torch.int8: 8, torch.int16: 16, torch.int32: 32, torch.int64: 64,
}
COMPLEX_PARTS: Mapping[torch.dtype, torch.dtype] = {torch.complex64: torch.float32, torch.complex128: torch.float64}
#: Dtypes whose CPU kernels compute in float32 and round once (their "opmath" type).
REDUCED_FLOATS = (torch.float16, torch.bfloat16)
#: Seconds the solver may spend on the values at the edges of the dtypes before the full search.
QUICK_SECONDS = 0.5
#: How many inputs the solver is asked for when its differences rest on uninterpreted functions' values.
UNINTERPRETED_TRIES = 4
#: Sizes of the one-dimensional inputs a counterexample is replayed with (the first that reproduces it).
REPLAY_SIZES = (1, 64)
#: z3's reason for an "unknown" answer when a SIGINT (Ctrl-C) arrived while it solved: it does not raise.
INTERRUPTED = "interrupted from keyboard"
#: Guard functions and attributes about the graph's structure and autograd, not values: taken as holding,
#: as verify takes them.
STRUCTURAL = frozenset({"num_users", "is_computed", "is_mutated", "requires_grad"})


class Outcome(enum.Enum):
    PROVED = "proved"
    REFUTED = "refuted"
    NOT_PROVABLE = "not provable here"
    MISMATCH = "solver/torch mismatch"


@attrs.frozen
class ProofCounterexample:
    """Inputs on which the solver found the two sides to differ, as replayed on tensors."""

    inputs: tuple[str, ...]
    problem: str
    reproduction: str
    #: The inputs by capture name (tensors, dtypes), for verify to replay; not part of the JSON.
    values: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False, metadata={"json": False})


@attrs.frozen
class RuleProof:
    rule: str
    location: str
    outcome: Outcome
    dtypes: tuple[str, ...] = ()  # proved: the dtypes of the tensor captures it is proved for
    reason: str = ""
    counterexample: ProofCounterexample | None = None
    seconds: float = 0.0
    axioms: tuple[str, ...] = ()  # proved: what the proof assumes of the transcendental functions it calls

    def __str__(self) -> str:
        head = f"{self.location}: {self.rule}: "
        if self.outcome is Outcome.PROVED:
            axioms = f"; axioms: {', '.join(self.axioms)}" if self.axioms else ""
            return head + f"proved (dtypes {', '.join(self.dtypes)}{axioms})"
        if self.counterexample is None:
            return head + f"{self.outcome.value}: {self.reason}"
        c = self.counterexample
        lines = [head + f"{self.outcome.value}: {self.reason}"]
        lines += ["  counterexample:"] + [f"    {line}" for line in c.inputs]
        lines += [f"  replayed: {c.problem}", "  reproduce:"] + [f"    {line}" for line in c.reproduction.splitlines()]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self, filter=lambda field, _: field.metadata.get("json", True),
                            value_serializer=lambda _, __, v: v.value if isinstance(v, Outcome) else v)


@attrs.frozen
class ProveReport:
    results: tuple[RuleProof, ...]

    @property
    def sound(self) -> bool:
        """No rule is refuted (a rule not provable here is not known to be wrong)."""
        return all(r.outcome is not Outcome.REFUTED for r in self.results)

    def __getitem__(self, rule: str) -> RuleProof:
        for result in self.results:
            if result.rule == rule:
                return result
        raise KeyError(rule)

    def __str__(self) -> str:
        counts = ", ".join(f"{sum(r.outcome is o for r in self.results)} {o.value}" for o in Outcome)
        return "\n".join([*(str(r) for r in self.results), f"{counted(len(self.results), 'rule')}: {counts}"])

    def to_json(self) -> str:
        return json.dumps({"rules": [r.to_dict() for r in self.results]}, indent=2)


def load_z3() -> types.ModuleType:
    """The z3 module, or a usage error saying how to install it."""
    try:
        return importlib.import_module("z3")
    except ImportError:
        raise FxrUsageError(INSTALL_HINT) from None


def prove(rules: RulesArgument, *, timeout: float = DEFAULT_TIMEOUT, names: Iterable[str] | None = None,
          allow: Iterable[str] = (), helpers: Mapping[str, Callable[..., Any]] | None = None) -> ProveReport:
    """Prove every rule of ``rules`` (or those in ``names``), each within ``timeout`` seconds of solver time."""
    z3 = load_z3()
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise FxrUsageError(f"timeout must be a positive number of seconds, got {timeout!r}")
    ruleset = load_rules(rules, allow)
    every = {**bundled_helpers.BUNDLED, **(helpers or {})}
    return ProveReport(tuple(prove_rule(rule, z3, float(timeout), every) for rule in _selected(ruleset, names)))


def _selected(ruleset: RuleSet, names: Iterable[str] | None) -> list[Rule]:
    if names is None:
        return list(ruleset)
    wanted = [names] if isinstance(names, str) else list(names)
    known = [rule.name for rule in ruleset]
    for name in wanted:
        if name not in known:
            hint = did_you_mean(name, known)
            raise FxrUsageError(f"no rule named {name!r} in the rules to prove" + (f"; {hint}" if hint else ""))
    return [rule for rule in ruleset if rule.name in wanted]


class _NotProvable(Exception):  # noqa: N818 - an outcome, not a failure
    """The rule is outside what this module models; the message says what."""


class _TorchError(Exception):
    """Torch raised running a node (not the model of it)."""


class _Refuted(Exception):  # noqa: N818 - an outcome, not a failure
    def __init__(self, outcome: Outcome, reason: str, counterexample: ProofCounterexample) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.counterexample = counterexample


def prove_rule(rule: Rule, z3: types.ModuleType, timeout: float,
               helpers: Mapping[str, Callable[..., Any]]) -> RuleProof:
    """One rule's outcome; ``z3`` is the solver module (:func:`load_z3`)."""
    started = time.perf_counter()
    base = RuleProof(rule.name, str(rule.span), Outcome.NOT_PROVABLE)
    try:
        with warnings.catch_warnings():  # torch's warnings about the configurations tried (a complex cast)
            warnings.simplefilter("ignore")
            prover = _Prover(rule, z3, started + timeout, helpers)
            dtypes = prover.run()
        result = attrs.evolve(base, outcome=Outcome.PROVED, dtypes=dtypes, axioms=tuple(sorted(prover.axioms)))
    except _NotProvable as reason:
        result = attrs.evolve(base, reason=str(reason))
    except _Refuted as found:
        result = attrs.evolve(base, outcome=found.outcome, reason=found.reason, counterexample=found.counterexample)
    except FxrError as error:
        result = attrs.evolve(base, reason=f"the rule cannot be built: {error}")
    except Exception as error:  # z3 refusing a term, torch refusing a call the model makes
        result = attrs.evolve(base, reason=f"prove could not model the rule: {type(error).__name__}: {error}")
    return attrs.evolve(result, seconds=time.perf_counter() - started)


# ---------------------------------------------------------------- what a rule's inputs are


#: The dtype that holds a Python number of each modeled scalar capture type (``float`` is IEEE double; an
#: ``int`` a tensor operation takes is within int64, torch raises beyond).
SCALAR_DTYPES: Mapping[str, torch.dtype] = {"float": torch.float64, "int": torch.int64}


def _tensor_dtypes(rule: Rule) -> dict[str, tuple[torch.dtype, ...] | str | None]:
    """Each graph input: the dtypes it takes if it is a tensor, None if it is a ``dtype``, ``"float"`` or
    ``"int"`` for a number; other inputs (a dim, a size, a bool) are not modeled."""
    roles = capture_roles(rule)
    kinds: dict[str, tuple[torch.dtype, ...] | str | None] = {}
    sizes = replacement_dims(rule)
    for name in input_names(rule):
        declared = rule.types.get(name)
        if name in sizes:
            raise _NotProvable(f"the replacement passes the size {name} of a tensor")
        if isinstance(declared, TensorType) and not declared.or_none:
            kinds[name] = declared.dtypes or ALL_DTYPES
        elif (isinstance(declared, ScalarType) and declared.name == "dtype") or roles.get(name) == "dtype":
            kinds[name] = None
        elif isinstance(declared, ScalarType) and declared.name in SCALAR_DTYPES:
            kinds[name] = declared.name
        elif declared is None and roles.get(name, "tensor") == "tensor":
            kinds[name] = ALL_DTYPES
        elif isinstance(declared, TensorType):
            raise _NotProvable(f"capture {name} may be None (Tensor | None): only tensor, dtype, float and int "
                               "captures are modeled")
        else:
            what = declared.name if isinstance(declared, ScalarType) else roles.get(name, type(declared).__name__)
            raise _NotProvable(f"capture {name} is a {what}: only tensor, dtype, float and int captures are "
                               "modeled")
    return kinds


def _check_rule_shape(rule: Rule) -> None:
    """Refuse what this module does not model before building anything."""
    for output in rule.replacement:
        for template in walk(output):
            if isinstance(template, HelperTemplate):
                raise _NotProvable(f"the replacement calls the helper @{template.name}")
    for name, declared in rule.types.items():
        if isinstance(declared, ModuleType):
            raise _NotProvable(f"capture {name} is a module ({declared.cls.__name__})")
    if rule.guard is not None:
        _check_guard(rule.guard)


def _check_operations(graphs: Standalone) -> None:
    """Refuse an operation outside the model before trying configurations (a matmul's operands are not one
    element, and the one-element inputs would not even reach it)."""
    for graph in (graphs.pattern, graphs.replacement):
        for node in graph.graph.nodes:
            if node.op in ("call_function", "call_method"):
                name = _operation_name(node)
                if name.endswith("_") and name not in ALIASES:
                    raise _NotProvable(f"the in-place operation {name}")
                if name not in CASTS and name not in PARAMETERS:
                    raise _NotProvable(name)


def _check_guard(guard: Guard) -> None:
    """Only guards about dtypes are decided (per configuration, where they are constants)."""
    def supported(expr: GuardExpr) -> bool:
        if isinstance(expr, GuardName | GuardConst):
            return True
        if isinstance(expr, GuardAttr):
            return expr.attr in ("dtype", *STRUCTURAL) and isinstance(expr.value, GuardName)
        if isinstance(expr, GuardCall):
            return expr.func in STRUCTURAL and expr.receiver is None and all(map(supported, expr.args))
        if isinstance(expr, GuardCompare):
            return supported(expr.left) and all(map(supported, expr.comparators))
        if isinstance(expr, GuardBool | GuardSeq):
            return all(map(supported, expr.values if isinstance(expr, GuardBool) else expr.items))
        if isinstance(expr, GuardUnary):
            return (expr.op == "not" and supported(expr.operand)) or (expr.op == "-" and isinstance(
                expr.operand, GuardConst))
        return False

    for condition in guard.conditions:
        if not supported(condition):
            raise _NotProvable(f"the guard at {condition.span} reads more than dtypes and numbers")


class _GuardTerms:
    """The guard as a condition on the numbers the solver chooses (a float or int capture): a part that
    reads none of them is decided on the configuration's values, as ``verify`` decides it."""

    def __init__(self, z3: types.ModuleType, rule: Rule, values: Mapping[str, Any],
                 scalars: Mapping[str, _Scalar]) -> None:
        self.z3 = z3
        self.rule = rule
        self.values = values
        self.scalars = scalars

    def condition(self) -> Any:
        """True or False, or a z3 condition when the guard reads numbers."""
        if self.rule.guard is None:
            return True
        truths = [self.truth(c) for c in self.rule.guard.conditions]
        if any(t is False for t in truths):
            return False
        symbolic = [t for t in truths if t is not True]
        return self.z3.And(*symbolic) if symbolic else True

    def truth(self, expr: GuardExpr) -> Any:
        if not _guard_names(expr) & self.scalars.keys():
            assert self.rule.guard is not None
            part = attrs.evolve(self.rule, guard=attrs.evolve(self.rule.guard, conditions=(expr,)))
            return guard_allows(part, self.values, {}, {})
        if isinstance(expr, GuardBool):
            parts = [self.truth(value) for value in expr.values]
            return (self.z3.And if expr.op == "and" else self.z3.Or)(*parts)
        if isinstance(expr, GuardUnary) and expr.op == "not":
            return self.z3.Not(self.truth(expr.operand))
        if isinstance(expr, GuardCompare):
            operands = [self.number(expr.left), *map(self.number, expr.comparators)]
            return self.z3.And(*(self.compare(op, a, b, expr) for op, a, b in zip(
                expr.ops, operands, operands[1:], strict=False)))
        raise _NotProvable(f"the guard at {expr.span} reads a number other than by comparing it")

    def number(self, expr: GuardExpr) -> Any:
        if isinstance(expr, GuardName) and expr.name in self.scalars:
            return self.scalars[expr.name]
        if isinstance(expr, GuardConst) and isinstance(expr.value, int | float):
            return expr.value
        if isinstance(expr, GuardUnary) and expr.op == "-" and isinstance(expr.operand, GuardConst):
            return -expr.operand.value
        raise _NotProvable(f"the guard at {expr.span} compares a number with something other than a number")

    def compare(self, op: str, a: Any, b: Any, expr: GuardExpr) -> Any:
        """Python's comparison of two numbers: IEEE for floats (NaN is unordered), exact for ints."""
        z3 = self.z3
        floats = any(isinstance(v, float) or (isinstance(v, _Scalar) and v.dtype.is_floating_point) for v in (a, b))
        a, b = (self.term(v, floats, expr) for v in (a, b))
        if floats:
            functions = {"<": z3.fpLT, "<=": z3.fpLEQ, ">": z3.fpGT, ">=": z3.fpGEQ, "==": z3.fpEQ,
                         "!=": lambda x, y: z3.Not(z3.fpEQ(x, y))}
        else:
            functions = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
                         "==": operator.eq, "!=": operator.ne}
        if op not in functions:
            raise _NotProvable(f"the guard at {expr.span} compares numbers with {op}")
        return functions[op](a, b)

    def term(self, value: Any, floats: bool, expr: GuardExpr) -> Any:
        z3 = self.z3
        if isinstance(value, _Scalar):
            if floats and not value.dtype.is_floating_point:
                raise _NotProvable(f"the guard at {expr.span} compares an int capture with a float")
            return value.term
        if floats:
            if float(value) != value:  # an int no double holds: Python compares it exactly
                raise _NotProvable(f"the guard at {expr.span} compares a float with {value}, which no float holds")
            return z3.FPVal(float(value), z3.Float64())
        if not -(1 << 63) <= value < 1 << 63:
            raise _NotProvable(f"the guard at {expr.span} compares an int capture with {value}, beyond int64")
        return z3.BitVecVal(value % (1 << 64), 64)


def _guard_names(expr: Any) -> set[str]:
    """The names a guard expression reads."""
    if isinstance(expr, GuardName):
        return {expr.name}
    found: set[str] = set()
    for value in attrs.astuple(expr, recurse=False) if attrs.has(type(expr)) else ():
        for item in value if isinstance(value, tuple) else (value,):
            found |= _guard_names(item)
    return found


@attrs.frozen
class _Config:
    """One dtype per tensor input and per ``dtype`` input (float64 or int64 for a number), and which
    tensors are 0-dim."""

    dtypes: tuple[tuple[str, torch.dtype], ...]
    zero_dim: frozenset[str]
    tensors: frozenset[str]
    scalars: frozenset[str] = frozenset()

    @property
    def values(self) -> list[tuple[str, torch.dtype]]:
        """The inputs the solver chooses values of: tensors' elements and numbers."""
        return [(name, dtype) for name, dtype in self.dtypes if name in self.tensors or name in self.scalars]

    def concrete(self) -> dict[str, Any]:
        """One-element inputs of this configuration (ones: no division by zero while torch tells dtypes)."""
        return {name: torch.ones((), dtype=dtype) if name in self.zero_dim else torch.ones(1, dtype=dtype)
                if name in self.tensors else (1.0 if dtype.is_floating_point else 1) if name in self.scalars
                else dtype for name, dtype in self.dtypes}

    def describe(self) -> str:
        return ", ".join(f"{name}: " + (("float" if dtype.is_floating_point else "int") if name in self.scalars else
                                        str(dtype).removeprefix("torch.") + (" 0-dim" if name in self.zero_dim else ""))
                         for name, dtype in self.dtypes)


def _configs(kinds: Mapping[str, tuple[torch.dtype, ...] | str | None]) -> Iterator[_Config]:
    tensors = [name for name, dtypes in kinds.items() if isinstance(dtypes, tuple)]
    scalars = frozenset(name for name, kind in kinds.items() if isinstance(kind, str))
    choices = [(SCALAR_DTYPES[kind],) if isinstance(kind, str) else kind if kind is not None else ALL_DTYPES
               for kind in kinds.values()]
    for combo in itertools.product(*choices):
        for flags in itertools.product((False, True), repeat=len(tensors)):
            yield _Config(tuple(zip(kinds, combo, strict=True)),
                          frozenset(name for name, flag in zip(tensors, flags, strict=True) if flag),
                          frozenset(tensors), scalars)


# ---------------------------------------------------------------- the prover of one rule


class _Prover:
    """Proves one rule: each choice of its alternatives, each configuration, until the deadline."""

    def __init__(self, rule: Rule, z3: types.ModuleType, deadline: float,
                 helpers: Mapping[str, Callable[..., Any]]) -> None:
        self.rule = rule
        self.z3 = z3
        self.deadline = deadline
        self.helpers = helpers
        self.elements = _Elements(z3)
        self.proved: dict[str, set[torch.dtype]] = {}
        self.seen: set[Any] = set()
        self.axioms: set[str] = set()  # those of the proved configurations

    def run(self) -> tuple[str, ...]:
        _check_rule_shape(self.rule)
        kinds = _tensor_dtypes(self.rule)
        if not any(isinstance(dtypes, tuple) for dtypes in kinds.values()):
            raise _NotProvable("the rule has no tensor capture")
        every = [build(self.rule, {}, self.helpers, choice) for choice in alternative_choices(self.rule)]
        for graphs in every:
            _check_operations(graphs)
        for graphs in every:
            for config in _configs(kinds):
                self.prove_config(graphs, config)
        if not self.proved:
            raise _NotProvable("no configuration of dtypes is in the pattern's domain")
        return tuple(f"{name}: {'|'.join(spelling for spelling, d in DTYPES.items() if d in dtypes)}"
                     for name, dtypes in self.proved.items())

    def prove_config(self, graphs: Standalone, config: _Config) -> None:
        if time.perf_counter() >= self.deadline:  # many captures make many configurations
            raise _NotProvable("timeout")
        inputs = config.concrete()
        ran = _concrete_run(graphs, inputs)
        if ran is None:
            return  # outside the pattern's domain
        self.elements.choices = {}  # the same names in each configuration: one cache key
        self.elements.applications = Applications(self.z3)
        scalars = {name: _Scalar(dtype, self.elements.fresh(name, dtype)) for name, dtype in config.dtypes
                   if name in config.scalars}
        symbols = {name: self.elements.fresh(name, dtype) if name in config.tensors else scalars.get(name, dtype)
                   for name, dtype in config.dtypes}
        guard = _GuardTerms(self.z3, self.rule, {**inputs, **ran}, scalars).condition()
        if guard is False:
            return
        pattern = _Evaluation(self.elements, graphs.pattern, inputs, symbols)
        replacement = _Evaluation(self.elements, graphs.replacement, inputs, symbols, raising_is_outcome=True)
        self.decide(graphs, config, symbols, [guard], pattern, replacement)
        for name in config.tensors:
            self.proved.setdefault(name, set()).add(dict(config.dtypes)[name])

    def decide(self, graphs: Standalone, config: _Config, symbols: Mapping[str, Any], domain: list[Any],
               pattern: _Evaluation, replacement: _Evaluation) -> None:
        z3 = self.z3
        if replacement.raised is not None:
            self.refute(graphs, config, None, f"the replacement raises {replacement.raised}")
        differs = _differences(self.elements, pattern.result, replacement.result, _signed_zeros(self.rule))
        if isinstance(differs, str):  # dtype or rank: the same on every value
            self.refute(graphs, config, None, differs)
        terms = {name: _term(symbols[name]) for name, _ in config.values}
        domain = [*domain, *(z3.Not(condition) for condition in (*pattern.raises, *pattern.crashes))]
        if self.rule.finite_inputs:
            domain += [self.elements.finite(terms[n], d) for n, d in config.values]
        axioms, names = self.elements.applications.axioms(self.elements.constant)
        domain += axioms
        if replacement.crashes and self.check([*domain, z3.Or(*replacement.crashes)]) is not None:
            raise _NotProvable("the replacement may divide the smallest integer by -1, which kills the process "
                               "in torch (SIGFPE): such a counterexample is not replayed")
        query = z3.Or(differs, *replacement.raises)
        key = (config.dtypes, z3.And(*domain, query).sexpr())
        if key not in self.seen:
            self.seen.add(key)
            self.search(graphs, config, terms, domain, query)
        self.axioms |= names

    def search(self, graphs: Standalone, config: _Config, terms: Mapping[str, Any], domain: list[Any],
               query: Any) -> None:
        """Refute the configuration if the solver finds inputs on which the sides differ.  With uninterpreted
        functions, the solver also chooses their values: a difference torch does not reproduce is not a
        counterexample, and the solver is asked for other inputs, a few times."""
        functions = sorted({call.function for call in self.elements.applications.calls})
        tried: list[str] = []
        values: dict[str, Any] = {}
        for _ in range(UNINTERPRETED_TRIES if functions else 1):
            model = self.solve(domain, query, terms, config)
            if model is None:
                return
            values = {name: self.elements.value(model, terms[name], dtype) for name, dtype in config.values}
            self.refute(graphs, config, values, "the solver found the outputs differ",
                                  uninterpreted=bool(functions))
            tried.append(", ".join(f"{name} = {value!r}" for name, value in values.items()))
            flat = [p for t in terms.values() for p in (t if isinstance(t, tuple) else (t,))]
            domain = [*domain, self.z3.Or(*(t != model.eval(t, model_completion=True) for t in flat))]
        self.replay_edges(graphs, config, values)
        raise _NotProvable(
            f"the solver's differences rest on the values it chose for {', '.join(functions)} (uninterpreted); "
            f"torch computes the same outputs on the inputs it found ({config.describe()}: {'; '.join(tried)})")

    def replay_edges(self, graphs: Standalone, config: _Config, values: Mapping[str, Any]) -> None:
        """Replay the values at the edges of the dtypes of (up to two) float tensor captures, the other inputs
        as the solver chose them: a refutation that does not depend on which models the solver found in the
        time it had (which depends on the machine's load)."""
        finite = self.rule.finite_inputs
        varied = [name for name, dtype in config.values if name in config.tensors and name not in config.zero_dim
                  and dtype in FLOAT_SORTS][:2]
        choices = [[v for v in _edge_values(dict(config.dtypes)[name]) if not finite or math.isfinite(v)]
                   for name in varied]
        for combination in itertools.product(*choices):
            if time.perf_counter() >= self.deadline:
                raise _NotProvable("timeout")
            chosen = {**values, **dict(zip(varied, combination, strict=True))}
            inputs = config.concrete()
            for name, value in chosen.items():
                inputs[name] = value if name in config.scalars else torch.tensor(
                    value if name in config.zero_dim else [value], dtype=inputs[name].dtype)
            try:
                problem, _ = _replay(self.rule, graphs, inputs)
            except Exception:  # the pattern raises: the input is outside its domain
                continue
            if problem is not None:
                self.refute(graphs, config, chosen, "torch's outputs differ at the edges of the dtypes")

    def solve(self, domain: list[Any], query: Any, terms: Mapping[str, Any], config: _Config) -> Any:
        """A model of ``domain`` and ``query``, or None when there is none. The values at the edges of each
        dtype (zeros, NaN, infinities, extremes) are tried first: the search among them is quick, and most
        wrong rules are wrong there."""
        edges = [self.elements.edges(terms[name], dtype) for name, dtype in config.values]
        model = self.check([*domain, *edges, query], quick=True)
        return model if model is not None else self.check([*domain, query])

    def check(self, assertions: list[Any], quick: bool = False) -> Any:
        remaining = self.deadline - time.perf_counter()
        if remaining <= 0:
            raise _NotProvable("timeout")
        # Bit-blasting the floating-point terms, with a fixed seed (the same answer on every run): z3's
        # default strategy takes minutes where this takes a second (-(x - y) against y - x in float32).
        z3 = self.z3
        solver = z3.Then("simplify", "fpa2bv", "simplify", "bit-blast", z3.With("sat", random_seed=0)).solver()
        solver.set("timeout", max(1, int(min(remaining, QUICK_SECONDS if quick else remaining) * 1000)))
        solver.add(*assertions)
        answer = solver.check()
        if answer == z3.unknown and solver.reason_unknown() == INTERRUPTED:
            raise KeyboardInterrupt  # z3 took the SIGINT (Ctrl-C) meant for the process
        if answer == z3.sat:
            return solver.model()
        if answer == z3.unsat or quick:
            return None
        raise _NotProvable("timeout" if time.perf_counter() >= self.deadline else
                           f"the solver gave up ({solver.reason_unknown()})")

    def refute(self, graphs: Standalone, config: _Config, values: Mapping[str, Any] | None, found: str,
               uninterpreted: bool = False) -> None:
        """Replay the configuration (with the solver's values, if any) on tensors; raise the outcome.  When
        torch computes the same and the solver's model rests on ``uninterpreted`` functions, return instead:
        the model, not the rule, may be what differs."""
        for size in REPLAY_SIZES:  # the kernel torch picks, and so a tie of max(-0.0, 0.0), depends on the size
            inputs = config.concrete()
            for name, value in (values or {}).items():
                zero_dim = name in config.zero_dim
                inputs[name] = value if name in config.scalars else torch.tensor(
                    value if zero_dim else [value] * size, dtype=inputs[name].dtype)
            problem, exact = _replay(self.rule, graphs, inputs)
            if exact is not None:
                break
        example = Example(inputs, {}, 0)
        if problem is None and exact is not None:
            raise _NotProvable(f"the outputs are not equal ({exact}; {config.describe()}: "
                               f"{'; '.join(example.describe())}), within the rule's @tolerance, which prove "
                               "does not encode")
        if problem is None and uninterpreted:
            return
        outcome = Outcome.REFUTED if problem is not None else Outcome.MISMATCH
        if problem is None:
            found += ("; torch computes the same on these inputs: the solver's model of an operation differs "
                      "from torch's")
            problem = "the same outputs"
        raise _Refuted(outcome, f"{found} ({config.describe()})",
                       ProofCounterexample(tuple(example.describe()), problem, reproduction(self.rule, example),
                                           example.values))


def _edge_values(dtype: torch.dtype) -> tuple[float, ...]:
    """The values at the edges of an integer or float dtype: zeros, ones, NaN, infinities, the extremes, the
    smallest normal and subnormal, a halfway value."""
    if dtype in INTEGER_BITS:
        bounds = torch.iinfo(dtype)
        integers = {0, 1, -1, 2, bounds.min, bounds.max, bounds.min + 1, bounds.max - 1}
        return tuple(sorted(v for v in integers if bounds.min <= v <= bounds.max))
    info = torch.finfo(dtype)
    magnitudes = [0.0, 1.0, 2.0, 0.5, 1.5, info.max, info.tiny, info.tiny * info.eps, math.inf]
    return (math.nan, *(sign * m for m in magnitudes for sign in (1.0, -1.0)))


def _term(symbol: Any) -> Any:
    return symbol.term if isinstance(symbol, _Scalar) else symbol


def _concrete_run(graphs: Standalone, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pattern's named interior values on ``inputs`` (for the guard), or None if the pattern raises."""
    interpreter = torch.fx.Interpreter(graphs.pattern, garbage_collect_values=False)
    interpreter.extra_traceback = False
    try:
        with torch.no_grad():
            interpreter.run(*(inputs[name] for name in graphs.inputs))
    except Exception:
        return None
    return {name: interpreter.env[node] for name, node in graphs.interior.items() if node in interpreter.env}


def _replay(rule: Rule, graphs: Standalone, inputs: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """Run both sides on ``inputs``: what differs as verify compares them (or None), and what differs in the
    bits (or None).  A rule without ``@tolerance`` claims bit-equal outputs: any difference refutes it."""
    arguments = [inputs[name] for name in graphs.inputs]
    with torch.no_grad():
        expected = graphs.pattern.forward(*(a.clone() if isinstance(a, torch.Tensor) else a for a in arguments))
        try:
            actual = graphs.replacement.forward(*(a.clone() if isinstance(a, torch.Tensor) else a for a in arguments))
        except Exception as error:
            raised = f"the replacement raises {type(error).__name__}: {error}"
            return raised, raised
    tolerance = (rule.tolerance.rtol or 0.0, rule.tolerance.atol or 0.0) if rule.tolerance else None
    problem = compare(expected, actual, tolerance)
    exact = problem[0] if problem is not None else _inexact(expected, actual)
    if problem is None and tolerance is None:
        return exact, exact
    return (problem[0] if problem is not None else None), exact


def _inexact(expected: Any, actual: Any) -> str | None:
    """How outputs that verify finds equal (within the dtype's rounding) differ in their bits, if they do."""
    pairs = zip(expected, actual, strict=True) if isinstance(expected, tuple | list) else [(expected, actual)]
    for e, a in pairs:
        if isinstance(e, torch.Tensor) and e.dtype.is_floating_point:
            both_nan = e.isnan() & a.isnan()
            if not torch.equal(e[~both_nan], a[~both_nan]):
                diff = (e[~both_nan].double() - a[~both_nan].double()).abs().max().item()
                return f"values differ by up to {diff:.6g}, within the rounding tolerance verify allows"
    return None


def _signed_zeros(rule: Rule) -> bool:
    """Whether the sign of a zero counts: it does unless the rule says ``@tolerance(atol=0.0, rtol=0.0)``, exact
    but for the sign of a zero (as ``torch.testing.assert_close`` with no tolerance compares)."""
    return rule.tolerance is None or bool(rule.tolerance.atol or rule.tolerance.rtol)


def _differences(elements: _Elements, pattern: Any, replacement: Any, signed_zeros: bool = True) -> Any:
    """A z3 condition under which the outputs differ, or the text of a difference no value changes."""
    if isinstance(pattern, tuple):
        if not isinstance(replacement, tuple) or len(pattern) != len(replacement):
            return "the outputs are not the same number of values"
        parts = [_differences(elements, p, r, signed_zeros) for p, r in zip(pattern, replacement, strict=True)]
        texts = [p for p in parts if isinstance(p, str)]
        return texts[0] if texts else elements.z3.Or(*parts)
    if not isinstance(pattern, _Tensor) or not isinstance(replacement, _Tensor):
        raise _NotProvable("an output is not a tensor")
    if pattern.dtype != replacement.dtype:
        return f"dtype {replacement.dtype} differs from the pattern's {pattern.dtype}"
    if pattern.zero_dim != replacement.zero_dim:
        return "the rank differs"
    if pattern.shape != replacement.shape:
        raise _NotProvable(f"shapes: the pattern's output broadcasts {_names(pattern.shape)}, the "
                           f"replacement's {_names(replacement.shape)}")
    return elements.z3.Not(elements.same(pattern.term, replacement.term, pattern.dtype, signed_zeros))


def _names(shape: frozenset[str]) -> str:
    return "{" + ", ".join(sorted(shape)) + "}" if shape else "no tensor (a scalar)"


# ---------------------------------------------------------------- one element of each dtype in z3


@attrs.frozen
class _Tensor:
    """One element of a tensor: its dtype, its z3 term (a pair for a complex dtype), the captures whose shapes
    broadcast into its shape, and whether it is 0-dim (which changes type promotion)."""

    dtype: torch.dtype
    term: Any
    shape: frozenset[str]
    zero_dim: bool = False


@attrs.frozen
class _Scalar:
    """A Python number the solver chooses: ``float64`` for a float, ``int64`` for an int."""

    dtype: torch.dtype
    term: Any


class _Elements:
    """z3 terms for single elements: sorts, constants, casts, equality as verify means it."""

    def __init__(self, z3: types.ModuleType) -> None:
        self.z3 = z3
        self.rne = z3.RNE()
        self.choices: dict[str, Any] = {}
        self.applications = Applications(z3)

    def sort(self, dtype: torch.dtype) -> Any:
        if dtype in FLOAT_SORTS:
            return self.z3.FPSort(*FLOAT_SORTS[dtype])
        if dtype in INTEGER_BITS:
            return self.z3.BitVecSort(INTEGER_BITS[dtype])
        if dtype == torch.bool:
            return self.z3.BoolSort()
        raise _NotProvable(f"dtype {dtype} is not modeled")

    def fresh(self, name: str, dtype: torch.dtype) -> Any:
        # one name per sort: z3's bit-blasting mixes up two constants of one name and different sorts
        name = f"{name}.{str(dtype).removeprefix('torch.')}"
        if dtype in COMPLEX_PARTS:
            part = self.sort(COMPLEX_PARTS[dtype])
            return (self.z3.Const(f"{name}.real", part), self.z3.Const(f"{name}.imag", part))
        return self.z3.Const(name, self.sort(dtype))

    def choice(self, key: str) -> Any:
        """A boolean the solver may pick: where torch's result depends on the kernel it picks (by size).  The
        same ``key`` (the same computation, hence the same sizes and kernel) gets the same boolean."""
        if key not in self.choices:
            self.choices[key] = self.z3.Bool(f"kernel_choice_{len(self.choices)}")
        return self.choices[key]

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> Any:
        """A Python number converted to ``dtype`` as torch converts a scalar (round to nearest even)."""
        z3 = self.z3
        if dtype in COMPLEX_PARTS:
            return (self.constant(value, COMPLEX_PARTS[dtype]), self.constant(0.0, COMPLEX_PARTS[dtype]))
        if dtype == torch.bool:
            return z3.BoolVal(bool(value))
        if dtype in INTEGER_BITS:
            if isinstance(value, float):
                raise _NotProvable(f"the float {value!r} converted to {dtype}")
            return z3.BitVecVal(int(value) % (1 << INTEGER_BITS[dtype]), INTEGER_BITS[dtype])
        if isinstance(value, bool | int):
            if not -(1 << 63) <= int(value) < 1 << 63:
                raise _NotProvable(f"the integer {value} is beyond int64")
            return self.cast(z3.BitVecVal(int(value) % (1 << 64), 64), torch.int64, dtype)
        return self.cast(z3.FPVal(value, z3.Float64()), torch.float64, dtype)

    def number(self, value: _Scalar, dtype: torch.dtype) -> Any:
        """A Python number the solver chooses, converted to ``dtype`` as torch converts a scalar."""
        if dtype in COMPLEX_PARTS:
            return (self.number(value, COMPLEX_PARTS[dtype]), self.constant(0.0, COMPLEX_PARTS[dtype]))
        if value.dtype.is_floating_point and dtype not in FLOAT_SORTS:
            raise _NotProvable(f"a float capture converted to {dtype}")
        if dtype == torch.bool or (dtype in INTEGER_BITS and dtype != torch.int64):
            raise _NotProvable(f"an int capture converted to {dtype} (torch wraps a number out of its range in "
                               "some operations and raises in others)")
        return self.cast(value.term, value.dtype, dtype)

    def cast(self, term: Any, source: torch.dtype, target: torch.dtype) -> Any:
        """``term`` of ``source`` converted to ``target`` as ``Tensor.to`` converts it."""
        z3 = self.z3
        if source == target:
            return term
        if target in COMPLEX_PARTS:
            part = COMPLEX_PARTS[target]
            if source in COMPLEX_PARTS:
                return tuple(self.cast(p, COMPLEX_PARTS[source], part) for p in term)
            return (self.cast(term, source, part), self.constant(0.0, part))
        if source in COMPLEX_PARTS:
            raise _NotProvable(f"a cast from {source} to {target}")
        if target == torch.bool:
            return self.nonzero(term, source)
        if source == torch.bool:
            return z3.If(term, self.constant(1, target), self.constant(0, target))
        if target in REDUCED_FLOATS and source in (torch.float64, torch.int32, torch.int64):
            # torch converts to float16 and bfloat16 through float32: two roundings
            return self.cast(self.cast(term, source, torch.float32), torch.float32, target)
        if target in FLOAT_SORTS:
            if source in FLOAT_SORTS:
                return z3.fpFPToFP(self.rne, term, self.sort(target))
            convert = z3.fpUnsignedToFP if source == torch.uint8 else z3.fpSignedToFP
            return convert(self.rne, term, self.sort(target))
        if source in FLOAT_SORTS:
            raise _NotProvable(f"a cast from {source} to {target} (torch leaves out-of-range values to the platform)")
        return self.resize(term, source, target)

    def resize(self, term: Any, source: torch.dtype, target: torch.dtype) -> Any:
        z3 = self.z3
        have, want = INTEGER_BITS[source], INTEGER_BITS[target]
        if want < have:
            return z3.Extract(want - 1, 0, term)
        if want == have:
            return term
        extend = z3.ZeroExt if source == torch.uint8 else z3.SignExt
        return extend(want - have, term)

    def nonzero(self, term: Any, dtype: torch.dtype) -> Any:
        z3 = self.z3
        if dtype == torch.bool:
            return term
        if dtype in COMPLEX_PARTS:
            return z3.Or(*(self.nonzero(p, COMPLEX_PARTS[dtype]) for p in term))
        if dtype in FLOAT_SORTS:
            return z3.Not(z3.fpIsZero(term))  # NaN is true
        return term != 0

    def same(self, a: Any, b: Any, dtype: torch.dtype, signed_zeros: bool = True) -> Any:
        """Equal as verify compares them: NaN equals NaN, -0.0 differs from 0.0 (z3's ``==`` on floats) unless
        the sign of a zero does not count (then IEEE equality, ``fpEQ``, also holds)."""
        if dtype in COMPLEX_PARTS:
            part = COMPLEX_PARTS[dtype]
            return self.z3.And(*(self.same(x, y, part, signed_zeros) for x, y in zip(a, b, strict=True)))
        if dtype in FLOAT_SORTS and not signed_zeros:
            return self.z3.Or(a == b, self.z3.fpEQ(a, b))
        return a == b

    def edges(self, term: Any, dtype: torch.dtype) -> Any:
        """``term`` is one of the values at the edges of ``dtype``: zeros, ones, NaN, infinities, the extremes,
        the smallest normal and subnormal, a halfway value."""
        z3 = self.z3
        if dtype in COMPLEX_PARTS:
            return z3.And(*(self.edges(p, COMPLEX_PARTS[dtype]) for p in term))
        if dtype == torch.bool:
            return z3.BoolVal(True)
        if dtype in INTEGER_BITS:
            return z3.Or(*(term == self.constant(v, dtype) for v in _edge_values(dtype)))
        sort = self.sort(dtype)
        return z3.Or(*(term == (z3.fpNaN(sort) if math.isnan(v) else z3.FPVal(v, sort)) for v in _edge_values(dtype)))

    def finite(self, term: Any, dtype: torch.dtype) -> Any:
        z3 = self.z3
        if dtype in COMPLEX_PARTS:
            return z3.And(*(self.finite(p, COMPLEX_PARTS[dtype]) for p in term))
        if dtype in FLOAT_SORTS:
            return z3.Not(z3.Or(z3.fpIsNaN(term), z3.fpIsInf(term)))
        return z3.BoolVal(True)

    def value(self, model: Any, term: Any, dtype: torch.dtype) -> Any:
        """The Python value the solver's model gives ``term``."""
        z3 = self.z3
        if dtype in COMPLEX_PARTS:
            return complex(*(self.value(model, p, COMPLEX_PARTS[dtype]) for p in term))
        if dtype == torch.bool:
            return z3.is_true(model.eval(term, model_completion=True))
        if dtype in INTEGER_BITS:
            number = model.eval(term, model_completion=True).as_long()
            bits = INTEGER_BITS[dtype]
            return number - (1 << bits) if dtype != torch.uint8 and number >= 1 << (bits - 1) else number
        if z3.is_true(model.eval(z3.fpIsNaN(term), model_completion=True)):
            return float("nan")
        bits = model.eval(z3.fpToIEEEBV(term), model_completion=True).as_long()
        if dtype == torch.float64:
            return struct.unpack("<d", bits.to_bytes(8, "little"))[0]
        if dtype == torch.bfloat16:
            return struct.unpack("<f", (bits << 16).to_bytes(4, "little"))[0]
        return struct.unpack("<e" if dtype == torch.float16 else "<f", bits.to_bytes(
            2 if dtype == torch.float16 else 4, "little"))[0]


# ---------------------------------------------------------------- running a graph on symbols


class _Evaluation(torch.fx.Interpreter):
    """Runs a graph on one-element tensors (torch decides dtypes and the domain) and, alongside, on z3 terms.

    ``raises`` collects the conditions under which an operation raises for some value (an integer division
    by zero); ``raised`` is the error when the graph raised on the one-element inputs (in the replacement,
    a refutation: the pattern ran there)."""

    def __init__(self, elements: _Elements, graph: torch.fx.GraphModule, inputs: Mapping[str, Any],
                 symbols: Mapping[str, Any], raising_is_outcome: bool = False) -> None:
        super().__init__(graph)
        self.extra_traceback = False  # reasons are shown to users: no graph dump in them
        self.elements = elements
        self.symbols = symbols
        self.symbolic: dict[torch.fx.Node, Any] = {}
        self.raises: list[Any] = []
        self.crashes: list[Any] = []
        self.raised: str | None = None
        self.result: Any = None
        names = [n.target for n in graph.graph.nodes if n.op == "placeholder"]
        try:
            with torch.no_grad():
                self.run(*(inputs[name] for name in names))
        except _TorchError as error:
            if not raising_is_outcome:
                raise _NotProvable(f"the pattern raised on one-element inputs: {error}") from error
            self.raised = str(error)

    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            concrete = super().run_node(n)
        except Exception as error:
            raise _TorchError(f"{type(error).__name__}: {error}") from error
        if n.op == "placeholder":
            name = str(n.target)
            self.symbolic[n] = self.tensor(self.symbols[name], concrete, frozenset({name}))
        elif n.op == "output":
            self.result = torch.fx.node.map_arg(n.args[0], lambda m: self.symbolic[m])
        elif n.op in ("call_function", "call_method"):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            symbolic = torch.fx.node.map_arg((n.args, n.kwargs), lambda m: self.symbolic[m])
            self.symbolic[n] = _Operation(self, n, args, kwargs, symbolic, concrete).evaluate()
        else:
            raise _NotProvable(f"a {n.op} node ({n.target})")
        return concrete

    @staticmethod
    def tensor(term: Any, concrete: Any, shape: frozenset[str]) -> Any:
        if not isinstance(concrete, torch.Tensor):
            return term
        return _Tensor(concrete.dtype, term, shape, concrete.dim() == 0)


def _computation(value: Any) -> str:
    """How a graph value is computed: its operations, captures and literals.  Equal computations on the same
    inputs give equal tensors, with equal layouts: torch runs the same kernels on them."""
    if isinstance(value, torch.fx.Node):
        if value.op == "placeholder":
            return str(value.target)
        target = value.target if isinstance(value.target, str) else torch.fx.node._get_qualified_name(value.target)
        arguments = [*map(_computation, value.args), *(f"{k}={_computation(v)}" for k, v in value.kwargs.items())]
        return f"{target}({', '.join(arguments)})"
    if isinstance(value, list | tuple):
        return f"[{', '.join(map(_computation, value))}]"
    return repr(value)


def _operation_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[-1]
    return str(getattr(target, "__name__", target))


#: Parameters of each modeled operation, by name, in order.
PARAMETERS: Mapping[str, tuple[str, ...]] = {
    **dict.fromkeys(("add", "sub", "subtract"), ("input", "other", "alpha")),
    **dict.fromkeys(("mul", "multiply", "minimum", "maximum", "logical_and", "logical_or", "logical_xor",
                     "bitwise_and", "bitwise_or", "bitwise_xor", "and_", "or_", "xor", "eq", "ne", "lt", "le",
                     "gt", "ge", "greater", "less", "greater_equal", "less_equal", "not_equal"),
                    ("input", "other")),
    **dict.fromkeys(("div", "divide", "truediv", "true_divide"), ("input", "other", "rounding_mode")),
    **dict.fromkeys(("neg", "negative", "abs", "absolute", "sign", "reciprocal", "logical_not", "bitwise_not",
                     "invert", "pos", "positive", "contiguous", "clone", "detach", "alias"), ("input",)),
    "relu": ("input", "inplace"),
    **dict.fromkeys(("clamp", "clip"), ("input", "min", "max")),
    "clamp_min": ("input", "min"),
    "clamp_max": ("input", "max"),
    "where": ("condition", "input", "other"),
    "dropout": ("input", "p", "training", "inplace"),
    **dict.fromkeys(("cat", "concat", "concatenate"), ("tensors", "dim")),
    **dict.fromkeys(("expand_as", "view_as", "reshape_as"), ("input", "other")),
    **{name: ("input", "inplace") if name in ("silu", "mish") else ("input",) for name in TRANSCENDENTALS},
}
#: Methods whose parameters are not in the function's order: ``x.where(c, y)`` is ``torch.where(c, x, y)``.
METHOD_PARAMETERS: Mapping[str, tuple[str, ...]] = {"where": ("input", "condition", "other")}
CASTS = frozenset({"to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "short", "char",
                   "byte", "bool"})
ALIASES: Mapping[str, str] = {
    "subtract": "sub", "multiply": "mul", "divide": "div", "truediv": "div", "true_divide": "div",
    "negative": "neg", "absolute": "abs", "clip": "clamp", "greater": "gt", "less": "lt", "greater_equal": "ge",
    "less_equal": "le", "not_equal": "ne", "and_": "bitwise_and", "or_": "bitwise_or", "xor": "bitwise_xor",
    "invert": "bitwise_not", "positive": "pos", "concat": "cat", "concatenate": "cat",
}
REFLECTED: Mapping[Any, str] = {operator.add: "add", operator.mul: "mul", operator.sub: "rsub",
                                operator.truediv: "rdiv"}
COMPARISONS: Mapping[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
    "ge": operator.ge,
}


class _Operation:
    """One node's element, computed from its arguments' elements with the dtypes torch computed in."""

    def __init__(self, run: _Evaluation, node: torch.fx.Node, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                 symbolic: tuple[Any, Any], concrete: Any) -> None:
        self.run = run
        self.z3 = run.elements.z3
        self.elements = run.elements
        self.node = node
        self.name = _operation_name(node)
        self.concrete = concrete
        self.args, self.kwargs = args, dict(kwargs)
        self.symbolic_args, self.symbolic_kwargs = symbolic

    def evaluate(self) -> Any:
        if self.name.endswith("_") and self.name not in ALIASES:
            raise _NotProvable(f"the in-place operation {self.name}")
        if self.name in CASTS:
            return self.cast()
        if self.name not in PARAMETERS:
            raise _NotProvable(self.name)
        if not isinstance(self.concrete, torch.Tensor):
            raise _NotProvable(f"{self.name} returns a {type(self.concrete).__name__}")
        concrete = self.bind(self.args, self.kwargs)
        symbolic = self.bind(self.symbolic_args, self.symbolic_kwargs)
        name = ALIASES.get(self.name, self.name)
        if self.node.target in REFLECTED and not isinstance(self.args[0], torch.Tensor):
            # s + x runs as x.__radd__(s), which is add(x, s); s - x as rsub; s / x as reciprocal(x) * s
            name = REFLECTED[self.node.target]
            if name in ("add", "mul"):
                concrete = {"input": concrete["other"], "other": concrete["input"]}
                symbolic = {"input": symbolic["other"], "other": symbolic["input"]}
        term = getattr(self, f"op_{name}")(concrete, symbolic)
        operands = [v for value in symbolic.values() for v in (value if isinstance(value, list | tuple) else [value])]
        shape = frozenset().union(*(v.shape for v in operands if isinstance(v, _Tensor)))
        return _Tensor(self.concrete.dtype, term, shape, self.concrete.dim() == 0)

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        methods = METHOD_PARAMETERS if self.node.op == "call_method" else {}
        names = methods.get(self.name, PARAMETERS[self.name])
        if len(args) > len(names) or any(k not in names for k in kwargs):
            raise _NotProvable(f"{self.name} with arguments {', '.join(map(str, kwargs)) or len(args)}")
        return {**dict(zip(names, args, strict=False)), **kwargs}

    # --- operands

    @property
    def dtype(self) -> torch.dtype:
        return self.concrete.dtype

    def operand(self, value: Any, dtype: torch.dtype) -> Any:
        """``value`` (an element or a Python number) converted to ``dtype``."""
        if isinstance(value, _Tensor):
            return self.elements.cast(value.term, value.dtype, dtype)
        if isinstance(value, _Scalar):
            return self.elements.number(value, dtype)
        if isinstance(value, bool | int | float):
            return self.elements.constant(value, dtype)
        raise _NotProvable(f"{self.name} of a {type(value).__name__}")

    def math_operands(self, op: str, symbolic: Mapping[str, Any]) -> tuple[Any, Any, torch.dtype]:
        """The two operands of add, sub, mul or div in the type the CPU kernel computes in (float32 for
        float16 and bfloat16, which round the result once).  The second operand comes through the result's
        dtype, except a Python number in mul and div, which the kernel converts straight to float32, and a
        tensor of another dtype, which the kernel may read either way (it depends on the sizes)."""
        result = self.dtype
        compute = torch.float32 if result in REDUCED_FLOATS else result
        a = self.elements.cast(self.operand(symbolic["input"], result), result, compute)
        b_value = symbolic["other"]
        via_result = self.elements.cast(self.operand(b_value, result), result, compute)
        if compute == result or (isinstance(b_value, _Tensor) and b_value.dtype == result):
            return a, via_result, compute
        if not isinstance(b_value, _Tensor):
            return a, self.operand(b_value, compute) if op in ("mul", "div") else via_result, compute
        return a, self.z3.If(self.choice("other"), self.operand(b_value, compute), via_result), compute

    def choice(self, slot: str) -> Any:
        """Which way this operation's kernel goes at ``slot``: the same for the same computation on either side
        (equal computations run on equal sizes, so on the same kernel)."""
        return self.elements.choice(f"{_computation(self.node)} {slot}")

    def rounded(self, term: Any, compute: torch.dtype) -> Any:
        return self.elements.cast(term, compute, self.dtype)

    # --- operations

    def op_add(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        self.unit_alpha(concrete)
        return self.arithmetic("add", concrete, symbolic)

    def op_sub(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        self.unit_alpha(concrete)
        return self.arithmetic("sub", concrete, symbolic)

    def op_rsub(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        # s - x runs as sub(s, x) with s the kernel's first operand: converted to the common dtype first
        return self.arithmetic("sub", concrete, symbolic, scalar_first=True)

    def op_mul(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        return self.arithmetic("mul", concrete, symbolic)

    def unit_alpha(self, concrete: Mapping[str, Any]) -> None:
        if concrete.get("alpha", 1) != 1:
            raise _NotProvable(f"{self.name} with alpha={concrete['alpha']!r}")

    def arithmetic(self, op: str, concrete: Mapping[str, Any], symbolic: Mapping[str, Any],
                   scalar_first: bool = False) -> Any:
        z3 = self.z3
        if self.dtype == torch.bool:
            if op == "sub":
                raise _NotProvable("sub of booleans")
            a, b = (self.operand(symbolic[n], torch.bool) for n in ("input", "other"))
            return z3.Or(a, b) if op == "add" else z3.And(a, b)
        if self.dtype in COMPLEX_PARTS:
            if op == "mul":
                raise _NotProvable("mul of complex numbers")
            a, b = (self.operand(symbolic[n], self.dtype) for n in ("input", "other"))
            return tuple(self.scalar_math(op, x, y, COMPLEX_PARTS[self.dtype]) for x, y in zip(a, b, strict=True))
        if scalar_first:  # both operands come from the common dtype
            a, b = (self.operand(symbolic[n], self.dtype) for n in ("input", "other"))
            compute = torch.float32 if self.dtype in REDUCED_FLOATS else self.dtype
            a, b = (self.elements.cast(t, self.dtype, compute) for t in (a, b))
        else:
            a, b, compute = self.math_operands(op, symbolic)
        return self.rounded(self.scalar_math(op, a, b, compute), compute)

    def scalar_math(self, op: str, a: Any, b: Any, dtype: torch.dtype) -> Any:
        z3 = self.z3
        if dtype in FLOAT_SORTS:
            function = {"add": z3.fpAdd, "sub": z3.fpSub, "mul": z3.fpMul, "div": z3.fpDiv}[op]
            return function(self.elements.rne, a, b)
        return {"add": operator.add, "sub": operator.sub, "mul": operator.mul}[op](a, b)

    def op_div(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        mode = concrete.get("rounding_mode")
        z3 = self.z3
        if self.dtype in COMPLEX_PARTS or self.dtype == torch.bool:
            raise _NotProvable(f"div of {self.dtype}")
        if self.dtype in INTEGER_BITS:
            return self.integer_division(mode, symbolic)
        a, b, compute = self.math_operands("div", symbolic)
        quotient = z3.fpDiv(self.elements.rne, a, b)
        if mode == "trunc":
            quotient = z3.fpRoundToIntegral(z3.RTZ(), quotient)
        elif mode is not None:
            raise _NotProvable(f"div with rounding_mode={mode!r} on floats")
        return self.rounded(quotient, compute)

    def integer_division(self, mode: str | None, symbolic: Mapping[str, Any]) -> Any:
        z3 = self.z3
        a, b = (self.operand(symbolic[n], self.dtype) for n in ("input", "other"))
        self.run.raises.append(b == 0)  # torch raises ZeroDivisionError
        if self.dtype in (torch.int32, torch.int64):  # the CPU traps (SIGFPE): the process dies
            smallest = self.elements.constant(torch.iinfo(self.dtype).min, self.dtype)
            self.run.crashes.append(self.z3.And(a == smallest, b == -1))
        if self.dtype == torch.uint8:
            return z3.UDiv(a, b)
        quotient = a / b  # z3's signed division truncates
        if mode == "trunc":
            return quotient
        remainder = z3.SRem(a, b)
        return z3.If(z3.And(remainder != 0, (remainder < 0) != (b < 0)), quotient - 1, quotient)

    def op_rdiv(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        """``s / x`` is ``x.reciprocal() * s`` in torch (``Tensor.__rtruediv__``)."""
        reciprocal = self.op_reciprocal(concrete, {"input": symbolic["other"]})
        inverse = _Tensor(self.dtype, reciprocal, frozenset())
        return self.arithmetic("mul", concrete, {"input": inverse, "other": symbolic["input"]})

    def op_neg(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        x = self.operand(symbolic["input"], self.dtype)
        if self.dtype in COMPLEX_PARTS:  # the vectorized kernel computes 0 - x: neg(-0.0) and neg(0.0) are 0.0
            zero = self.elements.constant(0.0, COMPLEX_PARTS[self.dtype])
            vectorized = self.choice("neg")
            return tuple(self.z3.If(vectorized, self.z3.fpSub(self.elements.rne, zero, p), self.z3.fpNeg(p)) for p in x)
        return self.z3.fpNeg(x) if self.dtype in FLOAT_SORTS else -x

    def op_pos(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        return self.operand(symbolic["input"], self.dtype)

    def op_abs(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        x = self.operand(symbolic["input"], self.dtype)
        if self.dtype in FLOAT_SORTS:
            return self.z3.fpAbs(x)
        if self.dtype in (torch.uint8, torch.bool):
            return x
        if self.dtype in INTEGER_BITS:
            return self.z3.If(x < 0, -x, x)
        raise _NotProvable(f"abs of {self.dtype}")

    def op_sign(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        z3 = self.z3
        x = self.operand(symbolic["input"], self.dtype)
        if self.dtype == torch.bool:
            return x
        if self.dtype in COMPLEX_PARTS:
            raise _NotProvable(f"sign of {self.dtype}")
        zero, one, minus = (self.elements.constant(v, self.dtype) for v in (0, 1, -1))
        if self.dtype in FLOAT_SORTS:  # sign(nan) is 0 in torch
            return z3.If(z3.fpGT(x, zero), one, z3.If(z3.fpLT(x, zero), minus, zero))
        if self.dtype == torch.uint8:
            return z3.If(x != 0, one, zero)
        return z3.If(x > 0, one, z3.If(x < 0, minus, zero))

    def op_reciprocal(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        if self.dtype not in FLOAT_SORTS:
            raise _NotProvable(f"reciprocal of {self.dtype}")
        compute = torch.float32 if self.dtype in REDUCED_FLOATS else self.dtype
        x = self.elements.cast(self.operand(symbolic["input"], self.dtype), self.dtype, compute)
        return self.rounded(self.z3.fpDiv(self.elements.rne, self.elements.constant(1, compute), x), compute)

    def op_relu(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        if concrete.get("inplace"):
            raise _NotProvable("relu with inplace=True")
        x = self.operand(symbolic["input"], self.dtype)
        zero = self.elements.constant(0, self.dtype)
        return self.z3.If(self.less(x, zero), zero, x)  # relu(-0.0) is -0.0 and relu(nan) nan, as in torch

    def less(self, a: Any, b: Any, dtype: torch.dtype | None = None) -> Any:
        dtype = dtype or self.dtype
        if dtype in FLOAT_SORTS:
            return self.z3.fpLT(a, b)
        if dtype == torch.uint8:
            return self.z3.ULT(a, b)
        if dtype == torch.bool:
            return self.z3.And(self.z3.Not(a), b)
        if dtype in INTEGER_BITS:
            return a < b
        raise _NotProvable(f"an ordering of {dtype}")

    def op_clamp(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        """``min(max(x, lo), hi)``, NaN if any is NaN; a number bound keeps x on a tie (clamp_min(-0.0, 0.0)
        is -0.0), a tensor bound lets the kernel pick either zero."""
        z3 = self.z3
        x = self.operand(symbolic["input"], self.dtype)
        result = x
        bounds = [(name, symbolic.get(name)) for name in ("min", "max") if symbolic.get(name) is not None]
        if not bounds:
            raise _NotProvable("clamp without bounds")
        for name, bound in bounds:
            limit = self.operand(bound, self.dtype)
            past = self.less(result, limit) if name == "min" else self.less(limit, result)
            result = z3.If(past, limit, self.tie(result, limit, name) if isinstance(bound, _Tensor) else result)
        if self.dtype in FLOAT_SORTS:
            nan = z3.fpNaN(self.elements.sort(self.dtype))
            bound_terms = [self.operand(b, self.dtype) for _, b in bounds]
            result = z3.If(z3.Or(*(z3.fpIsNaN(t) for t in (x, *bound_terms))), nan, result)
        return result

    def tie(self, a: Any, b: Any, slot: str) -> Any:
        """Where neither of a, b is less: a float kernel returns either (it picks by size: -0.0 or 0.0)."""
        if self.dtype not in FLOAT_SORTS:
            return a
        return self.z3.If(self.choice(slot), a, b)

    def op_clamp_min(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        return self.op_clamp(concrete, {**symbolic, "max": None})

    def op_clamp_max(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        return self.op_clamp(concrete, {**symbolic, "min": None})

    def op_maximum(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        return self.extremum(symbolic, larger=True)

    def op_minimum(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        return self.extremum(symbolic, larger=False)

    def extremum(self, symbolic: Mapping[str, Any], larger: bool) -> Any:
        z3 = self.z3
        a, b = (self.operand(symbolic[n], self.dtype) for n in ("input", "other"))
        if self.dtype == torch.bool:
            return z3.Or(a, b) if larger else z3.And(a, b)
        first = self.less(b, a) if larger else self.less(a, b)
        second = self.less(a, b) if larger else self.less(b, a)
        result = z3.If(first, a, z3.If(second, b, self.tie(a, b, "tie")))
        if self.dtype in FLOAT_SORTS:
            nan = z3.fpNaN(self.elements.sort(self.dtype))
            return z3.If(z3.Or(z3.fpIsNaN(a), z3.fpIsNaN(b)), nan, result)
        return result

    def comparison(self, name: str, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        z3 = self.z3
        dtype = torch.result_type(concrete["input"], concrete["other"])
        a, b = (self.operand(symbolic[n], dtype) for n in ("input", "other"))
        if dtype in COMPLEX_PARTS:
            if name not in ("eq", "ne"):
                raise _NotProvable(f"{name} of complex numbers")
            equal = z3.And(*(z3.fpEQ(x, y) for x, y in zip(a, b, strict=True)))
            return equal if name == "eq" else z3.Not(equal)
        if dtype in FLOAT_SORTS:
            functions = {"eq": z3.fpEQ, "ne": z3.fpNEQ, "lt": z3.fpLT, "le": z3.fpLEQ, "gt": z3.fpGT, "ge": z3.fpGEQ}
            return functions[name](a, b)  # fpNEQ is true on NaN, as != is
        if dtype == torch.bool:
            a, b = (z3.If(t, z3.BitVecVal(1, 8), z3.BitVecVal(0, 8)) for t in (a, b))
            dtype = torch.uint8
        if dtype == torch.uint8 and name in ("lt", "le", "gt", "ge"):
            return {"lt": z3.ULT, "le": z3.ULE, "gt": z3.UGT, "ge": z3.UGE}[name](a, b)
        return COMPARISONS[name](a, b)

    def op_where(self, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        condition = symbolic["condition"]
        if not isinstance(condition, _Tensor):
            raise _NotProvable("where with a condition that is not a tensor")
        test = self.elements.nonzero(condition.term, condition.dtype)
        a, b = (self.operand(symbolic[n], self.dtype) for n in ("input", "other"))
        if self.dtype in COMPLEX_PARTS:
            return tuple(self.z3.If(test, x, y) for x, y in zip(a, b, strict=True))
        return self.z3.If(test, a, b)

    def logical(self, name: str, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        """Both operands are converted to their common dtype first (a float32 1e-45 with a float16 is False)."""
        z3 = self.z3
        names = [n for n in ("input", "other") if n in symbolic]
        common = torch.result_type(*(concrete[n] for n in names)) if len(names) == 2 else concrete["input"].dtype
        truths = [self.elements.nonzero(self.operand(symbolic[n], common), common) for n in names]
        result = {"logical_and": z3.And, "logical_or": z3.Or, "logical_xor": z3.Xor,
                  "logical_not": z3.Not}[name](*truths)
        return self.elements.cast(result, torch.bool, self.dtype)

    def bitwise(self, name: str, symbolic: Mapping[str, Any]) -> Any:
        z3 = self.z3
        operands = [self.operand(symbolic[n], self.dtype) for n in ("input", "other") if n in symbolic]
        if self.dtype == torch.bool:
            functions: Mapping[str, Callable[..., Any]] = {"bitwise_and": z3.And, "bitwise_or": z3.Or,
                                                           "bitwise_xor": z3.Xor, "bitwise_not": z3.Not}
        elif self.dtype in INTEGER_BITS:
            functions = {"bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
                         "bitwise_not": operator.invert}
        else:
            raise _NotProvable(f"{name} of {self.dtype}")
        return functions[name](*operands)

    def __getattr__(self, name: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], Any]:
        """The operations that share one method: comparisons, logical and bitwise ones, the identities."""
        op = name.removeprefix("op_")
        if op in COMPARISONS:
            return lambda concrete, symbolic: self.comparison(op, concrete, symbolic)
        if op.startswith("logical_"):
            return lambda concrete, symbolic: self.logical(op, concrete, symbolic)
        if op.startswith("bitwise_"):
            return lambda concrete, symbolic: self.bitwise(op, symbolic)
        if op in ("contiguous", "clone", "detach", "alias", "dropout", "cat", "expand_as", "view_as",
                  "reshape_as"):
            return lambda concrete, symbolic: self.identity(op, concrete, symbolic)
        if op in TRANSCENDENTALS:
            return lambda concrete, symbolic: self.transcendental(op, concrete, symbolic)
        raise AttributeError(name)

    def transcendental(self, function: str, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        """An application of an uninterpreted function of the dtype (see :mod:`fxrules.verification.axioms`)."""
        if concrete.get("inplace"):
            raise _NotProvable(f"{function} with inplace=True")
        value = symbolic["input"]
        if not isinstance(value, _Tensor) or value.dtype != self.dtype or self.dtype not in FLOAT_SORTS:
            what = value.dtype if isinstance(value, _Tensor) else type(value).__name__
            raise _NotProvable(f"{function} of {what}: a transcendental function is modeled on float tensors only")
        argument = self.node.args[0] if self.node.args else self.node.kwargs["input"]
        return self.elements.applications.apply(function, self.dtype, value.term, self.elements.sort(self.dtype),
                                                _computation(argument))

    def identity(self, op: str, concrete: Mapping[str, Any], symbolic: Mapping[str, Any]) -> Any:
        """Operations that keep each element: copies, dropout that is not training, cat of one tensor, and
        the *_as operations of a tensor whose shape is the other's."""
        value = symbolic.get("input")
        if op == "dropout" and concrete.get("training", True) is not False:
            raise _NotProvable("dropout that may be training")
        if op == "cat":
            tensors = symbolic["tensors"]
            if not isinstance(tensors, list | tuple) or len(tensors) != 1:
                raise _NotProvable("cat of more than one tensor")
            value = tensors[0]
        if op in ("expand_as", "view_as", "reshape_as") and symbolic["input"].shape != symbolic["other"].shape:
            raise _NotProvable(f"{op} of tensors of shapes from other captures")
        if not isinstance(value, _Tensor):
            raise _NotProvable(f"{op} of a {type(value).__name__}")
        return value.term

    def cast(self) -> Any:
        value = self.symbolic_args[0] if self.symbolic_args else None
        if not isinstance(value, _Tensor) or not isinstance(self.concrete, torch.Tensor):
            raise _NotProvable(f"{self.name} of a {type(value).__name__}")
        if any(k not in ("dtype", "non_blocking", "copy", "memory_format") for k in self.kwargs):
            raise _NotProvable(f"{self.name} with {', '.join(self.kwargs)}")
        term = self.elements.cast(value.term, value.dtype, self.concrete.dtype)
        return _Tensor(self.concrete.dtype, term, value.shape, self.concrete.dim() == 0)
