"""Why a complete match is not used: the closed set of skip reasons, and the exception that carries one.

Each :class:`SkipReason` says when it applies; ``docs/language.md`` shows
the same table (a test keeps the two equal), and a :class:`~fxrules.engine.report.Report`
counts skips by reason.  Matching raises a skip for what it finds at the
match (a guard, a typed capture's metadata), rewriting for what building the
replacement meets (a helper's unknown value, literal arithmetic), and the
safety checks (:mod:`fxrules.match.safety`) for what the rewrite would break.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fxrules.graph.sizes import DynamicSize


class SkipReason(str, enum.Enum):
    """A reason to skip a match; the value is the name reports and docs show."""

    when: str

    def __new__(cls, value: str, when: str) -> SkipReason:
        reason = str.__new__(cls, value)
        reason._value_ = value
        reason.when = when
        return reason

    def __str__(self) -> str:
        return str(self.value)

    # As its name: a reason and its name are the same key of a report's counts (str's own slot, not a method
    # calling it: a report hashes a reason at every skip).
    __hash__ = str.__hash__

    GUARD_FALSE = (
        "guard false",
        "the guard is false")
    GUARD_ERROR = (
        "guard error",
        "the guard fails to evaluate (an index out of range, a type error)")
    DYNAMIC_SIZE = (
        "dynamic size",
        "the guard, a typed capture's dims, the replacement or a helper needs the value of a size the graph "
        "leaves symbolic (sizes from `example_inputs`, a dynamic dim); with `static_shapes=True` the rule may"
        " specialize the graph ([§10](#10-types-in-given))")
    MISSING_METADATA = (
        "missing metadata",
        "a tensor-typed capture of the match is a node without shape metadata (checked first: the guard and "
        "the checks below are then not evaluated), or the guard reads metadata the graph lacks "
        "([§10](#10-types-in-given))")
    ESCAPING_USER = (
        "escaping user",
        "an interior node has a user outside the match (every user counts, even a dead one)")
    IMPURE = (
        "impure",
        "the match would delete an impure node (`Node.is_impure()`) whose target the pattern does not name "
        "explicitly, or a node with an effect beyond its result (an in-place write, `copy_`, `out=`, a submodule "
        "call that may write, *What a module call writes*) that the replacement does not perform on the same "
        "tensor")
    CYCLE = (
        "cycle",
        "a capture depends on one of the match's own nodes, so the rewrite would create a cycle")
    ORDER = (
        "order",
        "a captured node is defined after the first output")
    OVERLAP = (
        "overlap",
        "part of the match was created by another rewrite in this pass")
    NO_CHANGE = (
        "no change",
        "the replacement computes what the match does: the matched node itself, or new nodes with the same "
        "targets and the same arguments after normalization (`aten.sin.default(x) => aten.sin(x)` in an "
        "aten-level graph, where the packet is emitted as the overload it matched)")
    IN_PLACE_WRITE = (
        "in-place write",
        "the replacement makes an output share memory with a value that already exists: the value itself (`x "
        "* 1 => x`), a view of it (`reshape(reshape(x, a), b) => reshape(x, b)`, where the first reshape "
        "copied) or an item of a sequence replacing the output (`torch.unbind(torch.stack([a, b])) => (a, b)`: "
        "a user's `[0]` of it is `a`), and the graph writes into either in place, directly or through any view "
        "or alias of it (`y "
        "= x * 1; y.add_(1)`, `y[0:1].zero_()`, `x.t().mul_(2)`, `F.relu(y, inplace=True)`, an "
        "`nn.ReLU(inplace=True)` call, `out=y`, `y` in an `out=` tuple or a `_foreach_*_` list, any argument an "
        "aten schema declares written, the running statistics `F.batch_norm(z, y, v, training=True)` (or "
        "`aten.batch_norm.default` training) updates, "
        "a submodule call that may write `y` or the attribute `y` reads, *What a module call writes*): "
        "the write would reach both; or the graph writes into a capture between a matched node reading it and "
        "the output the replacement goes before (`r = x.relu(); x.add_(1); r.relu()`): the replacement would "
        "read another value")
    ALIAS = (
        "alias",
        "such a replacement, where the output (or a view of it) is returned and the existing value is, or "
        "shares memory with, a graph input, a parameter or buffer, or another returned value: a caller "
        "writing into the result would change them (`def f(x): return x * 1.0` keeps its multiplication). In "
        "a subgraph of `torch.cond` (and `while_loop`, `map`, `scan`) the operator itself refuses a subgraph "
        "that returns one of its inputs, or one value twice")
    BUDGET = (
        "budget",
        "the rule took more than 1,000 match steps at this node without an answer (see *Bounded work* below);"
        " nothing is known about whether it matches there")
    LITERAL_BOUND = (
        "literal bound",
        "the replacement computes a literal from the match's literals (`c * c`) that would be over the bound "
        "(see *Bounded work* below)")
    FOLD_ERROR = (
        "fold error",
        "the replacement's literal arithmetic fails on this match's literals (`1.0 / c` where `c` is `0.0`); "
        "the rule still applies where it can")
    GRAD_MODE = (
        "grad mode",
        "the graph has grad-mode regions (Dynamo's `torch.no_grad()` / `torch.inference_mode()`, the subgraph"
        " of `wrap_with_set_grad_enabled` in an exported program), and the match spans two modes, or a "
        "replacement output computed without grad, and used where grad is not disabled, would become a value "
        "that may require it (`neg(neg(x)) => x` inside `torch.no_grad()`, the result used after it): the "
        "values are equal, but gradients would not be")
    AUTOCAST = (
        "autocast",
        "the graph runs under `torch.autocast` (Dynamo's enter and exit calls, the subgraph of `wrap_with_autocast`"
        " in an exported program, a graph compiled inside the region), and the match spans two autocast states, "
        "or under autocast an output of the replacement would have another dtype than the matched one "
        "(`matmul(a, w) + b => addmm(b, a, w)`: autocast runs `addmm` in bfloat16 on CPU, and the bias made the "
        "sum float32), or a new node would compute in a dtype autocast casts it to that no node of the match "
        "with its operation computed in, or the dtypes cannot be found (a node without metadata, an operation "
        "that cannot run on fake tensors)")
    FILTERED = (
        "filtered",
        "the caller's filter refused the match (`fxrules.replace_pattern` keeps torch's matching rules this way)")
    VALUE_UNKNOWN = (
        "value unknown",
        "a helper needs the value of a tensor that is only known when the graph runs (a graph input, as "
        "parameters are in `torch.compile` graphs and in subgraphs of higher-order operators)")
    LITERAL_RECEIVER = (
        "literal receiver",
        "the replacement makes an output a literal, and a user of that output calls a method on it "
        "(`1.contiguous()` would not compile)")
    NO_ATEN_SPELLING = (
        "no aten spelling",
        "the graph is aten-level and a replacement operation has no aten spelling")
    DECOMPOSED_OPERATOR = (
        "decomposed operator",
        "in Inductor's post-grad pass, a replacement operation is one the compiler decomposes before the pass")
    NO_NEW_TENSORS = (
        "no new tensors",
        "a helper returned a new tensor where the graph cannot hold one (a subgraph of a higher-order "
        "operator)")


def reasons_table() -> str:
    """The Markdown table of every reason, as the docs show it."""
    rows = [f"| `{reason.value}` | {reason.when} |" for reason in SkipReason]
    return "\n".join(["| reason | when |", "| --- | --- |", *rows])


class Skip(Exception):  # noqa: N818 - a control-flow signal carrying the skip reason
    """The pattern matched but the match cannot be used; ``reason`` says why, ``detail`` how.

    The detail may be given as a function that writes it: a report keeps a few examples of each
    reason, and most skips are never shown.
    """

    # Slots, and no call of Exception.__init__ (its args are the constructor's, set before __init__ runs): about
    # 0.2 us less per skip, and an apply may skip thousands of matches.
    __slots__ = ("_detail", "reason")

    def __init__(self, reason: SkipReason, detail: str | Callable[[], str]) -> None:
        self.reason = reason
        self._detail = detail

    @classmethod
    def dynamic_size(cls, dynamic: DynamicSize) -> Skip:
        """The ``dynamic size`` skip for a rule that needed the value of a symbolic size (its message says
        which and how to opt in)."""
        return cls(SkipReason.DYNAMIC_SIZE, str(dynamic))

    @property
    def detail(self) -> str:
        if not isinstance(self._detail, str):
            self._detail = self._detail()
        return self._detail

    def __str__(self) -> str:
        return self.detail
