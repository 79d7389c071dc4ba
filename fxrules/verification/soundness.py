"""Checking that rules are sound: pattern and replacement agree on generated inputs.

For each rule (and each choice of its alternatives), hypothesis draws inputs
with :func:`fxrules.verification.strategies.examples`, the pattern and the replacement run
as standalone graphs (:mod:`fxrules.rewrite.standalone`), and their outputs are
compared: shapes and dtypes exactly, NaN and inf positions exactly, the rest
within the dtype's tolerance (or the rule's ``@tolerance``).  Inputs the
pattern rejects are outside the rule's domain; a replacement that raises
where the pattern did not is unsound.  A rule ends ``sound``, ``unsound``
with a shrunk counterexample, ``inconclusive`` with the reason, or ``error``
when it cannot be run as written (an fxrules error, with its location):
whatever a rule raises while it is verified ends as one of these verdicts.
Runs are seeded (:data:`~fxrules.verification.options.DEFAULT_SEED` unless a
seed is given), their draws depend on nothing else (not on the caller's
modules), and they write no file unless a database directory is given.

When z3 is installed, each rule first goes to the prover
(:mod:`fxrules.verification.prove`).  A proof covers the values of the
outputs, for every input of the dtypes it lists; the examples still check
the rest (gradients, inputs left as they were, aliasing), and a rule both
proved and sound on them is ``proved``.  A refutation is replayed through
the same checks as a drawn example: it makes the rule ``unsound``, with no
sampling, when they find the difference too (not just different bits within
the tolerance) on an input of the kind verify draws.
"""

from __future__ import annotations

import contextlib
import enum
import json
import keyword
import math
import os
import tempfile
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs
import torch
import torch.fx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import configuration as hypothesis_configuration
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky, Unsatisfiable

from fxrules.diagnostics import FxrError, FxrUsageError
from fxrules.engine.driver import RulesArgument, Selection, load_rules
from fxrules.engine.report import counted
from fxrules.lang.ir import HelperTemplate, Rule, walk
from fxrules.match.guards import Predicates, predicate_table, unknown_predicate, using_predicates
from fxrules.rewrite import helpers as bundled_helpers
from fxrules.rewrite.standalone import (
    ConstantsInterpreter,
    alternative_choices,
    build_replacement,
    input_names,
)
from fxrules.verification.options import (
    DEFAULT_EXAMPLES,
    DEFAULT_MAX_SIDE,
    DEFAULT_SEED,
    DtypesArgument,
    VerifyOptions,
)
from fxrules.verification.strategies import (
    Example,
    NoGeneratorError,
    Rejections,
    example_of,
    examples,
    in_drawn_domain,
    replica,
    without_local_constants,
)

#: (rtol, atol) by dtype, as torch.testing.assert_close uses them.
TOLERANCES: Mapping[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


#: Candidates tried while shrinking a counterexample (hypothesis would try up to 500, at ~50 ms each).
SHRINK_CALLS = 100

#: What a sound rule that changes aliasing means, shown with it.
ALIASING_CONTRACT = ("sound only as apply rewrites it: after the rewrite an in-place write into the output "
                     "(out.add_(1)) or the input also changes the other, so apply skips a match where either "
                     "is written in place through any view, or is a graph output")


class Verdict(enum.Enum):
    PROVED = "proved"  # sound on the examples, and its values proved for every input (``RuleVerdict.proved``)
    SOUND = "sound"
    UNSOUND = "unsound"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"  # the rule cannot run as written: an fxrules error with its location


@attrs.frozen
class Counterexample:
    """An input on which pattern and replacement disagree, after shrinking."""

    inputs: tuple[str, ...]
    problem: str
    max_abs_diff: float | None
    max_rel_diff: float | None
    reproduction: str
    #: The prover found it (verify's checks then found the difference on it too), not a drawn example.
    found_by_prover: bool = False


@attrs.frozen
class RuleVerdict:
    rule: str
    location: str
    verdict: Verdict
    examples: int
    reason: str = ""
    counterexample: Counterexample | None = None
    seconds: float = 0.0
    #: How the replacement's outputs alias its inputs differently from the pattern's, for a sound rule:
    #: sound only as ``apply`` rewrites it (see :data:`ALIASING_CONTRACT`).
    aliasing: tuple[str, ...] = ()
    #: For a proved rule, the dtypes of its tensor captures the proof covers (``x: float32|float64``).
    proved: tuple[str, ...] = ()
    #: What the prover said of the rule ("" when it was not asked): its outcome and reason.
    proof: str = ""
    #: When the prover refuted the rule but verify's checks did not confirm its counterexample: why not.
    unconfirmed: str = ""

    @property
    def sound(self) -> bool:
        """Sound on the examples, proved or not."""
        return self.verdict in (Verdict.SOUND, Verdict.PROVED)

    def __str__(self) -> str:
        head = f"{self.location}: {self.rule}: "
        if self.verdict in (Verdict.SOUND, Verdict.PROVED):
            proved = f"proved ({'; '.join(self.proved)}), " if self.verdict is Verdict.PROVED else ""
            changes = f"; aliasing changes: {'; '.join(self.aliasing)}" if self.aliasing else ""
            lines = [head + proved + f"sound ({self.examples} examples{changes})"]
            if self.aliasing:
                lines.append(f"  {ALIASING_CONTRACT}")
            if self.unconfirmed:
                lines.append(f"  the prover: {self.proof}; {self.unconfirmed}")
            return "\n".join(lines)
        if self.verdict in (Verdict.INCONCLUSIVE, Verdict.ERROR):
            return head + f"{self.verdict.value}: {self.reason}"
        assert self.counterexample is not None
        c = self.counterexample
        lines = [head + f"unsound: {c.problem}"]
        if c.found_by_prover:
            lines.append(f"  found by the prover: {self.proof}")
        differences = [f"max {kind} diff {diff:.6g}" for kind, diff in (("abs", c.max_abs_diff),
                                                                      ("rel", c.max_rel_diff)) if diff is not None]
        if differences:
            lines.append(f"  {', '.join(differences)}")
        lines += ["  counterexample:"] + [f"    {line}" for line in c.inputs]
        lines += ["  reproduce:"] + [f"    {line}" for line in c.reproduction.splitlines()]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self, value_serializer=lambda _, __, v: v.value if isinstance(v, Verdict) else v)


@attrs.frozen
class VerifyReport:
    results: tuple[RuleVerdict, ...]
    seed: int = DEFAULT_SEED
    #: Whether the rules went to the prover first (``prove=True`` and z3 installed).
    proving: bool = False

    @property
    def sound(self) -> bool:
        """No rule is unsound or in error (inconclusive ones are not known to be wrong)."""
        return all(r.verdict not in (Verdict.UNSOUND, Verdict.ERROR) for r in self.results)

    def __getitem__(self, rule: str) -> RuleVerdict:
        for result in self.results:
            if result.rule == rule:
                return result
        raise KeyError(rule)

    def __str__(self) -> str:
        """One block per rule, then the counts; a proved rule counts as sound, and how many of those were
        proved is said when any was."""
        counts = {v: sum(r.verdict is v for r in self.results) for v in Verdict}
        sound = counts[Verdict.SOUND] + counts[Verdict.PROVED]
        proved = f" ({counts[Verdict.PROVED]} proved)" if counts[Verdict.PROVED] else ""
        summary = (f"{sound} sound{proved}, {counts[Verdict.UNSOUND]} unsound, {counts[Verdict.INCONCLUSIVE]} "
                   f"inconclusive, {counted(counts[Verdict.ERROR], 'error')}")
        return "\n".join([*(str(r) for r in self.results),
                          f"{counted(len(self.results), 'rule')}: {summary} (seed {self.seed})"])

    def to_json(self) -> str:
        return json.dumps({"seed": self.seed, "proving": self.proving, "rules": [r.to_dict() for r in self.results]},
                          indent=2)


class _Disagreement(Exception):  # noqa: N818 - hypothesis re-raises it on the shrunk example
    def __init__(self, problem: str, example: Example, abs_diff: float | None, rel_diff: float | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.example = example
        self.abs_diff = abs_diff
        self.rel_diff = rel_diff

    @property
    def outcome(self) -> tuple[str, float | None, float | None]:
        return self.problem, self.abs_diff, self.rel_diff


class _NondeterministicError(Exception):
    """The rule disagreed on an input, then not in the same way when that input was run again."""


class _RuleError(Exception):
    """Building or running the replacement raised an fxrules error: the rule cannot run as written."""


class _UncomparableError(Exception):
    """The outputs are values verify cannot compare."""


def compare(expected: Any, actual: Any, tolerance: tuple[float, float] | None,
            signed_zeros: bool | None = None) -> tuple[str, float | None, float | None] | None:
    """None when ``actual`` agrees with ``expected``; else (problem, max abs diff, max rel diff).

    Dtype and shape must be equal, nan and inf in the same places, integers and booleans equal, floats
    within ``tolerance`` (rtol, atol), never tighter than the dtype's own rounding (:data:`TOLERANCES`).
    ``signed_zeros`` (by default: when there is no ``tolerance``, i.e. the rule claims exactness) also
    tells ``-0.0`` from ``0.0``.
    """
    if isinstance(expected, tuple | list):
        if not isinstance(actual, tuple | list) or len(actual) != len(expected):
            return f"the pattern returns {_kind(expected)} but the replacement returns {_kind(actual)}", None, None
        for index, (e, a) in enumerate(zip(expected, actual, strict=True)):
            problem = compare(e, a, tolerance, signed_zeros)
            if problem is not None:
                return (f"output {index}: {problem[0]}", problem[1], problem[2])
        return None
    if not isinstance(expected, torch.Tensor):
        expected = torch.tensor(expected)
        actual = torch.tensor(actual) if isinstance(actual, int | float | bool) else actual
    if not isinstance(actual, torch.Tensor):
        return f"the replacement returns {_kind(actual)}, not a tensor", None, None
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} differs from the pattern's {tuple(expected.shape)}", None, None
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} differs from the pattern's {expected.dtype}", None, None
    if expected.is_complex():
        expected, actual = torch.view_as_real(expected.resolve_conj()), torch.view_as_real(actual.resolve_conj())
    return _compare_values(expected, actual, tolerance, tolerance is None if signed_zeros is None else signed_zeros)


def _compare_values(expected: torch.Tensor, actual: torch.Tensor, tolerance: tuple[float, float] | None,
                    signed_zeros: bool) -> tuple[str, float | None, float | None] | None:
    if not expected.dtype.is_floating_point:
        if torch.equal(expected, actual):
            return None
        largest = (expected.long() - actual.long()).abs().max().item() if expected.numel() else 0
        return "values differ", float(largest), None
    e, a = expected.double(), actual.double()
    if not torch.equal(e.isnan(), a.isnan()):
        return "NaN appears in different places", None, None
    infinite = e.isinf() | a.isinf()
    if not torch.equal(e[infinite], a[infinite]):
        return "inf appears in different places", None, None
    zeros = (e == 0) & (a == 0)
    if signed_zeros and not torch.equal(e[zeros].signbit(), a[zeros].signbit()):
        return "the sign of a zero differs (-0.0 and 0.0)", None, None
    rtol, atol = map(max, zip(tolerance or (0.0, 0.0), TOLERANCES.get(expected.dtype, (1.3e-6, 1e-5)), strict=True))
    finite = ~(e.isnan() | infinite)
    diff = (e[finite] - a[finite]).abs()
    if not diff.numel():
        return None
    limit = atol + rtol * e[finite].abs()
    if bool((diff <= limit).all()):
        return None
    relative = (diff / e[finite].abs().clamp_min(1e-12)).max().item()
    return "values differ beyond tolerance", diff.max().item(), relative


def _kind(value: Any) -> str:
    if isinstance(value, tuple | list):
        return f"{len(value)} values"
    return type(value).__name__


class _RuleCheck:
    """Runs one rule's replacement on one example and checks it against what the pattern did there."""

    def __init__(self, rule: Rule, helpers: Mapping[str, Callable[..., Any]], choice: Mapping[int, int]) -> None:
        self.rule = rule
        self.helpers = helpers
        self.choice = choice
        self.tolerance = (rule.tolerance.rtol or 0.0, rule.tolerance.atol or 0.0) if rule.tolerance else None
        self.names = input_names(rule)
        self.valid = 0
        self.aliasing: dict[str, None] = {}  # every change of aliasing seen, first seen first

    def check(self, example: Example) -> None:
        """Count ``example`` as reaching the comparison, and compare it."""
        self.valid += 1
        self.compare(example)

    def reproduces(self, example: Example, found: _Disagreement) -> bool:
        """Whether running ``example`` again disagrees the same way, to the same differences (verify runs on
        one thread, where a deterministic rule gives the same bits every time; a random one seldom does)."""
        try:
            self.compare(example)
        except _Disagreement as again:
            return repr(again.outcome) == repr(found.outcome)
        return False

    def compare(self, example: Example) -> None:
        """Compare the replacement with the pattern's output, computed when the example was drawn (inputs
        the pattern rejects are never drawn): outputs, inputs as left, aliasing, then gradients."""
        inputs = {name: replica(example.values[name]) for name in self.names}
        replacement = _call(lambda: build_replacement(self.rule, example.constants(), self.helpers, self.choice,
                                                      example.values))
        if isinstance(replacement, _Raised):  # a helper raised, or the replacement cannot be built
            actual = replacement
        else:
            with torch.no_grad():
                actual = _call(lambda: replacement.forward(*inputs.values()))
        if isinstance(actual, _Raised) and actual.rule_error:
            raise _RuleError(actual.text)
        if isinstance(actual, _Raised):  # a replacement must not fail where the pattern works
            raise _Disagreement(f"the replacement raises {actual.text}", example, None, None)
        problem = _call(lambda: compare(example.expected, actual, self.tolerance))
        if isinstance(problem, _Raised):
            raise _UncomparableError(f"verify cannot compare the pattern's {_kind(example.expected)} with the "
                                     f"replacement's {_kind(actual)} ({problem.text})")
        self.expect(problem, example)
        for name in self.names:
            if not _same_state(example.left[name], inputs[name]):
                raise _Disagreement(f"input {name} is left different from how the pattern leaves it",
                                    example, None, None)
        self.aliasing.update(dict.fromkeys(aliasing_changes(example.expected, example.left, actual, inputs)))
        if self.rule.grad_check:
            self.check_gradients(example, replacement)

    def check_gradients(self, example: Example, replacement: torch.fx.GraphModule) -> None:
        """For float inputs: which outputs are differentiable, and the gradients of a fixed weighted sum of
        them with respect to each float input, must agree."""
        names = [n for n in self.names if _differentiable(example.values[n])]
        if not names or _has_empty(example.values.values()) or _has_empty(_flat(example.expected)):
            return  # an empty tensor has no gradient to compare, and some backward kernels crash on one (SIGFPE)
        assert example.pattern is not None, "examples() records the graph the pattern ran as"
        pattern = ConstantsInterpreter(example.pattern.module, example.constants())
        expected = _gradients(pattern.run, self.names, names, example)
        if isinstance(expected, _Raised):  # the pattern has no gradient here (say an in-place write to an input)
            return
        actual = _gradients(replacement.forward, self.names, names, example)
        if isinstance(actual, _Raised):
            raise _Disagreement(f"the replacement's gradient raises {actual.text}", example, None, None)
        for index, (e, a) in enumerate(zip(expected[0], actual[0], strict=True)):
            if e != a:
                which = "is" if a else "is not"
                raise _Disagreement(f"output {index} {which} differentiable in the replacement, unlike in the "
                                    "pattern", example, None, None)
        for name, e_grad, a_grad in zip(names, expected[1], actual[1], strict=True):
            problem = compare(e_grad, a_grad, _gradient_tolerance(self.tolerance, e_grad), signed_zeros=False)
            if problem is not None:
                problem = (f"the gradient with respect to {name}: {problem[0]}", *problem[1:])
            self.expect(problem, example)

    @staticmethod
    def expect(problem: tuple[str, float | None, float | None] | None, example: Example) -> None:
        if problem is not None:
            raise _Disagreement(problem[0], example, problem[1], problem[2])


def _gradient_tolerance(tolerance: tuple[float, float] | None, gradient: torch.Tensor) -> tuple[float, float]:
    """Rounding accumulates over a backward pass, in proportion to the largest terms summed, not to each
    result: a gradient is compared within ten times the forward tolerance, relative to its largest element
    (as an absolute tolerance)."""
    rtol, atol = map(max, zip(tolerance or (0.0, 0.0), TOLERANCES.get(gradient.dtype, (1.3e-6, 1e-5)),
                              strict=True))
    finite = gradient[gradient.isfinite()] if gradient.is_floating_point() else gradient
    largest = float(finite.abs().max()) if finite.numel() else 0.0
    return 10 * rtol, 10 * (atol + rtol * largest)


def _has_empty(values: Iterable[Any]) -> bool:
    return any(_has_empty(v) if isinstance(v, list | tuple) else isinstance(v, torch.Tensor) and not v.numel()
               for v in values)


def _differentiable(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def _gradients(graph: Callable[..., Any], order: tuple[str, ...], names: list[str],
               example: Example) -> tuple[tuple[bool, ...], tuple[torch.Tensor, ...]] | _Raised:
    """Which outputs of ``graph`` (a standalone graph, called with the inputs in ``order``) require grad, and
    the gradients of their sum weighted by seeded random cotangents with respect to the inputs ``names``
    (leaves of the same strides); or what raised."""
    leaves = {name: replica(example.values[name]).requires_grad_() for name in names}
    inputs = [leaves[name] if name in leaves else replica(example.values[name]) for name in order]

    def run() -> tuple[tuple[bool, ...], tuple[torch.Tensor, ...]]:
        with torch.enable_grad():
            outputs = [o for o in _flat(graph(*inputs)) if isinstance(o, torch.Tensor)]
            differentiable = [o for o in outputs if o.requires_grad]
            generator = torch.Generator().manual_seed(example.seed)
            weights = [torch.randn(o.shape, generator=generator, dtype=o.dtype) for o in differentiable]
            grads = torch.autograd.grad(differentiable, list(leaves.values()), weights,
                                        allow_unused=True) if differentiable else (None,) * len(leaves)
        return (tuple(o.requires_grad for o in outputs),
                tuple(torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves.values(), grads,
                                                                                    strict=True)))

    return _call(run)


def _flat(value: Any) -> list[Any]:
    return list(value) if isinstance(value, tuple | list) else [value]


def _same_state(left: Any, right: Any) -> bool:
    """Whether two replicas of an input hold the same bits, in the view and in the rest of its base."""
    if isinstance(left, list | tuple):
        return all(_same_state(a, b) for a, b in zip(left, right, strict=True))
    if not isinstance(left, torch.Tensor):
        return True
    return all(torch.equal(_bits(a), _bits(b)) for a, b in ((left, right), (_root(left), _root(right))))


def _root(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor._base is None else tensor._base


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    flat = torch.empty(tensor.numel(), dtype=tensor.dtype)  # contiguous even when empty (its strides count)
    return flat.copy_(tensor.detach().reshape(-1)).view(torch.uint8)


def aliasing_changes(expected: Any, pattern_inputs: Mapping[str, Any], actual: Any,
                     inputs: Mapping[str, Any]) -> list[str]:
    """How the replacement's outputs alias its inputs differently from the pattern's: an output that is an
    input (``x * 1 => x``), or a view of one (a copy become a view), on one side only."""
    changes = []
    for index, (e, a) in enumerate(zip(_flat(expected), _flat(actual), strict=False)):
        before, after = _relation(e, pattern_inputs), _relation(a, inputs)
        if before != after:
            changes.append(f"output {index} is {after} (in the pattern: {before})")
    return changes


def _relation(output: Any, inputs: Mapping[str, Any]) -> str:
    if not isinstance(output, torch.Tensor):
        return "not a tensor"
    storage = output.untyped_storage()._cdata
    for name, value in inputs.items():
        if output is value:
            return f"input {name}"
        if isinstance(value, torch.Tensor) and value.untyped_storage()._cdata == storage:
            return f"a view of input {name}"
    return "a new tensor"


@attrs.frozen
class _Raised:
    text: str
    rule_error: bool  # an fxrules error (the rule cannot run as written), not an input the replacement fails on


def _call(run: Callable[[], Any]) -> Any:
    """What ``run`` returns (building and running the replacement), or what it raised. Raising from here,
    outside the handler, keeps the fresh graph code out of the exception's context: hypothesis would call a
    failure with another context flaky."""
    try:
        return run()
    except FxrError as error:
        return _Raised(str(error), rule_error=True)
    except Exception as error:
        return _Raised(f"{type(error).__name__}: {error}", rule_error=False)


def reproduction(rule: Rule, example: Example) -> str:
    """Python lines that rebuild the inputs and run both sides."""
    lines = ["import torch", "import fxrules", "from fxrules.rewrite.standalone import build"]
    lines.append(f"rule = fxrules.load({rule.file!r})[{rule.name!r}]" if not rule.file.startswith("<")
                 else f"rule = ...  # the rule {rule.name} of {rule.file}")
    for name, value in example.values.items():
        # nan and inf are no Python names: float('nan') rebuilds them
        source = _tensor_source(value) if isinstance(value, torch.Tensor) else (
            f"float({str(value)!r})" if isinstance(value, float) and not math.isfinite(value) else repr(value))
        lines.append(f"{_variable(name)} = {source}")
    constants = [f"{name!r}: {_variable(name)}" for name in example.attributes]
    constants += [f"{name!r}: ...  # {module!r}, parameters from torch.manual_seed({example.seed})"
                  for name, module in example.modules.items()]
    lines.append("constants = {" + ", ".join(constants) + "}")
    lines.append("graphs = build(rule, constants, {})")
    arguments = ", ".join(map(_variable, input_names(rule)))
    lines.append(f"print(graphs.pattern({arguments}), graphs.replacement({arguments}))")
    return "\n".join(lines)


def _variable(capture: str) -> str:
    """The Python variable holding ``capture``'s value: a capture may be named like a keyword (``lambda``)."""
    return f"{capture}_" if keyword.iskeyword(capture) else capture


def _tensor_source(value: torch.Tensor) -> str:
    """Python that rebuilds ``value`` with its values, strides, and base if it is a view."""
    def literal(tensor: torch.Tensor) -> str:
        text = repr(tensor.tolist()).replace("nan", "float('nan')").replace("inf", "float('inf')")
        return f"torch.tensor({text}, dtype={tensor.dtype})"

    if value._base is not None:
        return f"{literal(value._base)}.as_strided({tuple(value.shape)}, {value.stride()}, {value.storage_offset()})"
    if value.is_contiguous():
        return literal(value)
    return f"torch.empty_strided({tuple(value.shape)}, {value.stride()}, dtype={value.dtype}).copy_({literal(value)})"


#: The private global in which hypothesis keeps its storage directory (``set_hypothesis_home_dir`` sets it).
HOME_GLOBAL = "__hypothesis_home_directory"


@attrs.define
class _Shared:
    """What verify changes for the whole process while any call is inside (calls in several threads overlap):
    the first call in changes it, the last one out puts back what the first found."""

    lock: threading.Lock = attrs.Factory(threading.Lock)
    depth: int = 0
    found: tuple[int, Any] = (1, None)
    home: tempfile.TemporaryDirectory[str] | None = None
    warnings: warnings.catch_warnings[None] | None = None


_SHARED = _Shared()


@contextlib.contextmanager
def _process_settings() -> Iterator[None]:
    """Inputs are tiny: torch's intra-op threads only cost (4x slower on a busy 2-core machine), so torch runs
    on one.  Hypothesis caches what it reads of the caller's own modules in ``.hypothesis/`` under the working
    directory, database or not: while verify runs, that storage is a temporary directory, removed after.  Torch's
    warnings about the drawn inputs (a complex value cast to real, a convolution of 0 channels) are the point of
    drawing them, not news to the user: they are silenced.  All three settings are the process's; the caller's
    are put back."""
    with _SHARED.lock:
        if not _SHARED.depth:
            _SHARED.found = (torch.get_num_threads(), getattr(hypothesis_configuration, HOME_GLOBAL, None))
            _SHARED.home = tempfile.TemporaryDirectory(prefix="fxrules-verify-")
            torch.set_num_threads(1)
            hypothesis_configuration.set_hypothesis_home_dir(_SHARED.home.name)
            _SHARED.warnings = warnings.catch_warnings()
            _SHARED.warnings.__enter__()
            warnings.simplefilter("ignore")
        _SHARED.depth += 1
    try:
        yield
    finally:
        with _SHARED.lock:
            _SHARED.depth -= 1
            if not _SHARED.depth and _SHARED.home is not None and _SHARED.warnings is not None:
                _SHARED.warnings.__exit__(None, None, None)
                threads, home = _SHARED.found
                torch.set_num_threads(threads)
                hypothesis_configuration.set_hypothesis_home_dir(home)
                _SHARED.home.cleanup()


def verify_rule(rule: Rule, *, max_examples: int = DEFAULT_EXAMPLES, seed_value: int | None = DEFAULT_SEED,
                max_side: int = DEFAULT_MAX_SIDE, dtypes: DtypesArgument = None,
                database: str | os.PathLike[str] | None = None,
                helpers: Mapping[str, Callable[..., Any]] | None = None,
                predicates: Predicates | None = None, prove: bool = True,
                prove_timeout: float | None = None) -> RuleVerdict:
    """Verify one rule (every choice of its alternatives); the options are those of :func:`verify`."""
    options = VerifyOptions.checked(max_examples=max_examples, seed=seed_value, max_side=max_side, dtypes=dtypes,
                                    database=database, prove=prove, prove_timeout=prove_timeout)
    return verify_checked(rule, options, helpers, predicate_table(predicates))


def verify_checked(rule: Rule, options: VerifyOptions, helpers: Mapping[str, Callable[..., Any]] | None = None,
                   predicates: Predicates | None = None) -> RuleVerdict:
    """One rule's verdict under ``options`` (:meth:`VerifyOptions.checked`), whatever the rule raises: an fxrules
    error is the rule's fault, anything else that escapes the checks (verify's own limits) leaves it
    inconclusive.  Inputs on which a user predicate of the guard is false are outside the rule's domain."""
    started = time.perf_counter()
    unknown = unknown_predicate([rule], predicates or {})
    if unknown is not None:  # as apply refuses it before touching a graph
        return _verdict(rule, Verdict.ERROR, unknown)
    every = {**bundled_helpers.BUNDLED, **(helpers or {})}
    try:
        with _process_settings(), without_local_constants(), \
                torch.random.fork_rng(devices=[]), using_predicates(predicates or {}):
            verdict = _proved_or_sampled(rule, options, every)
    except FxrError as error:
        verdict = _verdict(rule, Verdict.ERROR, str(error))
    except Exception as error:
        verdict = _verdict(rule, Verdict.INCONCLUSIVE, f"verify could not run the rule: {type(error).__name__}: "
                                                       f"{error}")
    return attrs.evolve(verdict, seconds=time.perf_counter() - started)


def _prover(options: VerifyOptions) -> tuple[types.ModuleType, types.ModuleType] | None:
    """The prove module and z3, or None when the prover is not asked (``prove=False``) or z3 is not installed
    (verify then samples, as it does without the prover)."""
    if not options.prove:
        return None
    from fxrules.verification import prove as proving  # not at the top: prove imports compare() from here

    try:
        return proving, proving.load_z3()
    except FxrUsageError:
        return None


def proves(options: VerifyOptions) -> bool:
    """Whether verify gives each rule to the prover first under ``options``: ``prove`` and z3 installed."""
    return _prover(options) is not None


def _proved_or_sampled(rule: Rule, options: VerifyOptions, helpers: Mapping[str, Callable[..., Any]]) -> RuleVerdict:
    """The prover's outcome (when it is asked), then the examples': a refutation that verify's own checks find
    too is unsound without sampling; a rule proved and sound on the examples is proved (the proof covers the
    values, the examples what it does not: gradients, inputs left as they were, aliasing)."""
    prover = _prover(options)
    if prover is None:
        return _sampled(rule, options, helpers)
    proving, z3 = prover
    proof = proving.prove_rule(rule, z3, options.prove_timeout or proving.DEFAULT_TIMEOUT, helpers)
    said = proof.outcome.value + (f" (dtypes {', '.join(proof.dtypes)})" if proof.dtypes else "") + (
        f": {proof.reason}" if proof.reason else "")
    unconfirmed = ""
    if proof.outcome is proving.Outcome.REFUTED and proof.counterexample is not None:
        replayed = _replayed(rule, proof.counterexample.values, helpers, options.draws.dtypes)
        if isinstance(replayed, RuleVerdict):
            return attrs.evolve(replayed, proof=said)
        unconfirmed = replayed
    verdict = attrs.evolve(_sampled(rule, options, helpers), proof=said, unconfirmed=unconfirmed)
    if verdict.verdict is Verdict.SOUND and proof.outcome is proving.Outcome.PROVED:
        return attrs.evolve(verdict, verdict=Verdict.PROVED, proved=proof.dtypes)
    return verdict


def _sampled(rule: Rule, options: VerifyOptions, helpers: Mapping[str, Callable[..., Any]]) -> RuleVerdict:
    torch.manual_seed(options.seed)  # random operations in a rule draw the same numbers on every run
    return _verify_rule(rule, options, helpers)


def _replayed(rule: Rule, values: Mapping[str, Any], helpers: Mapping[str, Callable[..., Any]],
              dtypes: tuple[torch.dtype, ...] | None) -> RuleVerdict | str:
    """The prover's counterexample run through verify's checks as a drawn example is: unsound if they find the
    difference too; else why not (different bits within the tolerance, or no input verify draws: a large
    finite value for a rule with ``@finite_inputs()``, a dtype outside ``dtypes``), and the examples decide."""
    if not in_drawn_domain(rule, values, dtypes):
        if in_drawn_domain(rule, values):
            return "its counterexample has a dtype verify was not asked to draw"
        return "its counterexample is not an input of the moderate finite size @finite_inputs() claims"
    why_not = "no alternative of the pattern takes its counterexample"
    for choice in alternative_choices(rule):
        example = example_of(rule, values, choice)
        if example is None:  # the pattern of this choice of alternatives rejects it
            continue
        try:
            _RuleCheck(rule, helpers, choice).check(example)
        except _Disagreement as found:
            return RuleVerdict(rule.name, str(rule.span), Verdict.UNSOUND, 0, found.problem,
                               attrs.evolve(_counterexample(rule, found), found_by_prover=True))
        except (_RuleError, _UncomparableError) as error:
            return f"its counterexample could not be checked on tensors ({error})"
        why_not = "verify's checks find no difference on its counterexample (the outputs differ within the " \
                  "rule's tolerance)"
    return why_not


def _verdict(rule: Rule, verdict: Verdict, reason: str, examples_run: int = 0) -> RuleVerdict:
    return RuleVerdict(rule.name, str(rule.span), verdict, examples_run, reason)


def _verify_rule(rule: Rule, options: VerifyOptions, helpers: Mapping[str, Callable[..., Any]]) -> RuleVerdict:
    unknown = [t for o in rule.replacement for t in walk(o) if isinstance(t, HelperTemplate) and t.name not in helpers]
    if unknown:  # as apply refuses it before touching a graph
        return _verdict(rule, Verdict.ERROR, f"{unknown[0].span}: unknown helper '@{unknown[0].name}'; bundled "
                                             f"helpers are {', '.join(sorted(bundled_helpers.BUNDLED))}; pass "
                                             "others with helpers={...}")
    total = 0
    choices = alternative_choices(rule)
    # the examples are shared among the alternatives, at least 10 each (unless fewer were asked for in all)
    per_choice = max(min(10, options.max_examples), options.max_examples // len(choices))
    aliasing: dict[str, None] = {}
    for choice in choices:
        check = _RuleCheck(rule, helpers, choice)
        rejections = Rejections()
        verdict = _run_hypothesis(rule, check, rejections, attrs.evolve(options, max_examples=per_choice))
        if verdict is not None:
            return verdict
        total += check.valid
        aliasing.update(check.aliasing)
        if check.valid < max(1, per_choice // 10):
            return _verdict(rule, Verdict.INCONCLUSIVE, _few_inputs(check.valid, rejections), check.valid)
    return attrs.evolve(_verdict(rule, Verdict.SOUND, "", total), aliasing=tuple(aliasing))


def _few_inputs(valid: int, rejections: Rejections) -> str:
    """Why (almost) no drawn input reached the comparison."""
    if not valid and rejections.pattern_raised and not (rejections.guard_raised or rejections.guard_false):
        return f"the pattern raised on every generated input (the last: {_first_line(rejections.pattern_error)})"
    if not valid and rejections.guard_raised and not rejections.guard_false:
        return f"the guard raised on every input the pattern accepted (the last: {_first_line(rejections.guard_error)})"
    found = (f"only {valid} of the generated inputs were in the pattern's domain and satisfied the guard" if valid
             else "no generated input satisfied the guard and the pattern's domain")
    counts = [f"{what} on {counted(n, 'input')}" for what, n in (
        ("the pattern raised", rejections.pattern_raised), ("the guard was false", rejections.guard_false),
        ("the guard raised", rejections.guard_raised)) if n]
    return found + (f" ({'; '.join(counts)})" if counts else "")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _run_hypothesis(rule: Rule, check: _RuleCheck, rejections: Rejections,
                    options: VerifyOptions) -> RuleVerdict | None:
    """Run one choice of the rule's alternatives: a verdict if it ends the rule's verification, else None."""
    database = DirectoryBasedExampleDatabase(options.database) if options.database is not None else None

    @settings(max_examples=options.max_examples, deadline=None, database=database,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              phases=[Phase.generate, Phase.shrink] if database is None else [Phase.reuse, Phase.generate,
                                                                              Phase.shrink])
    @given(st.data())
    def property_(data: st.DataObject) -> None:
        example = data.draw(strategy)
        if budget.spent():  # every later candidate passes, so the shrinker stops
            return
        try:
            check.check(example)
        except _Disagreement as disagreement:
            if not check.reproduces(example, disagreement):
                if budget.found is not None:
                    return  # a random outcome is no smaller counterexample of the one found
                budget.found = _NondeterministicError()  # and shrinking one would find nothing
                budget.calls = SHRINK_CALLS
            else:
                budget.found = disagreement
            raise

    # The seed as hypothesis.seed() sets it, without the database=None that seed() also imposes; the database
    # key keeps one rule's saved inputs apart from another's (they share this function's source), and holds
    # even when pytest's --hypothesis-seed is set (hypothesis then derives no key).
    property_._hypothesis_internal_use_seed = options.seed  # type: ignore[attr-defined]
    property_._hypothesis_internal_database_key = (  # type: ignore[attr-defined]
        f"fxrules verify {rule.file}::{rule.name}::{sorted(check.choice.values())}".encode())
    budget = _ShrinkBudget()
    try:
        # built once, not per example (it keeps the pattern graphs); building it raises NoGeneratorError
        strategy = examples(rule, options.draws, check.choice, rejections)
        budget.run(property_)
    except _Disagreement as found:
        return RuleVerdict(rule.name, str(rule.span), Verdict.UNSOUND, check.valid, found.problem,
                           _counterexample(rule, found))
    except _RuleError as error:
        return _verdict(rule, Verdict.ERROR, str(error), check.valid)
    except _UncomparableError as error:
        return _verdict(rule, Verdict.INCONCLUSIVE, str(error), check.valid)
    except (Flaky, _NondeterministicError):
        return _verdict(rule, Verdict.INCONCLUSIVE, "the outcome changed when an input was run again: the pattern "
                                                    "or the replacement is not deterministic", check.valid)
    except Unsatisfiable:
        return _verdict(rule, Verdict.INCONCLUSIVE, _few_inputs(0, rejections))
    except NoGeneratorError as missing:
        return _verdict(rule, Verdict.INCONCLUSIVE, str(missing))
    return None


def _counterexample(rule: Rule, found: _Disagreement) -> Counterexample:
    return Counterexample(tuple(found.example.describe()), found.problem, found.abs_diff, found.rel_diff,
                          reproduction(rule, found.example))


@attrs.define
class _ShrinkBudget:
    """Shrinking a counterexample is most of verify's time (each candidate draws and runs the pattern): it
    stops after :data:`SHRINK_CALLS` candidates, with the smallest failing example found so far."""

    found: _Disagreement | _NondeterministicError | None = None
    calls: int = 0

    def spent(self) -> bool:
        if self.found is None:
            return False
        self.calls += 1
        return self.calls > SHRINK_CALLS

    def run(self, test: Callable[[], None]) -> None:
        """Run ``test``; raise the last disagreement found (or that the rule is not deterministic), also when
        hypothesis could not replay it (it stopped shrinking)."""
        try:
            test()
        except Flaky:
            if self.found is None:
                raise
            raise self.found from None
        except _Disagreement as found:
            raise self.found or found from None
        if self.found is not None:
            raise self.found


def verify(rules: RulesArgument, *, max_examples: int = DEFAULT_EXAMPLES, seed: int | None = DEFAULT_SEED,
           max_side: int = DEFAULT_MAX_SIDE, dtypes: DtypesArgument = None, names: Iterable[str] | None = None,
           database: str | os.PathLike[str] | None = None, allow: Iterable[str] = (),
           helpers: Mapping[str, Callable[..., Any]] | None = None, only: Selection = None,
           exclude: Selection = None, predicates: Predicates | None = None, prove: bool = True,
           prove_timeout: float | None = None) -> VerifyReport:
    """Check every rule of ``rules`` (those ``only``/``exclude`` select, as in ``apply``; ``names`` is ``only``)
    for soundness on generated inputs; ``helpers`` and ``predicates`` as in ``apply``.

    ``max_examples`` inputs per rule, drawn from ``seed`` (the same seed draws the same inputs), tensors of at
    most ``max_side`` elements per dim and, if given, only of ``dtypes`` (``"float32,int64"`` or a sequence);
    ``database``: a directory where hypothesis keeps the failing inputs it found, to try first next time
    (without it, verify writes no file).  ``prove``: give each rule to the prover first when z3 is installed
    (``prove_timeout`` solver seconds per rule, by default prove's); without z3, verify only samples.
    """
    options = VerifyOptions.checked(max_examples=max_examples, seed=seed, max_side=max_side, dtypes=dtypes,
                                    database=database, prove=prove, prove_timeout=prove_timeout)
    if names is not None and only is not None:
        raise FxrUsageError("give verify names= or only= (the same option), not both")
    selected = load_rules(rules, allow).select(names if only is None else only, exclude)
    table = predicate_table(predicates)
    return VerifyReport(tuple(verify_checked(rule, options, helpers, table) for rule in selected), options.seed,
                        proving=proves(options))
