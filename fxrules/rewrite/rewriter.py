"""Splicing one match's replacement into the graph with torch.fx primitives, undoably.

Steps for a match: (1) emit the replacement's nodes before the earliest
matched output (``Graph.inserting_before``), each shared template once, in
dependency order; helpers run here, and each operation is spelled for the graph's level
(:mod:`fxrules.rewrite.aten`: as written, but families, packets, and aten operators only where the
graph's consumer requires them); the ``emit`` stage of the safety checks
(:mod:`fxrules.match.safety`) runs before, the ``splice`` stage after (a refusal undoes
what was emitted); (2) give the new nodes the replaced
output's ``stack_trace``/``nn_module_stack``, provenance in
``meta["fxrules"]``, and shape metadata (copied for outputs, inferred for the
rest); (3) redirect the outputs' users (``Node.replace_all_uses_with``);
(4) retire the matched nodes that became dead: they stay in the graph, seen
by nobody, until the commit erases them.  Every change is logged in a
:class:`Transaction`, so a failed ``apply`` can undo them all in place
instead of working on a copy of the graph.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Collection, Container, Mapping, Sequence
from typing import Any, NamedTuple

import attrs
import torch
import torch.fx

from fxrules.diagnostics import FxrApplyError
from fxrules.graph.autocast import autocast_regions, running
from fxrules.graph.metadata import (
    GraphEffects,
    has_metadata,
    infer_metadata,
    may_write_in_place,
    tensor_info,
)
from fxrules.graph.module_data import UnreadableAttribute, read_module_attribute
from fxrules.graph.sizes import SYMBOLIC, DynamicSize, dynamic_size, is_size_error, literal
from fxrules.graph.subgraphs import NO_NEW_TENSORS, OUTSIDE, TOP_LEVEL, CallContext, grad_modes
from fxrules.lang.bounds import LiteralTooLarge, bounded
from fxrules.lang.ir import (
    Capture,
    HelperTemplate,
    Literal,
    OpKind,
    OpTemplate,
    Rule,
    SeqTemplate,
    SliceTemplate,
    Template,
)
from fxrules.match.matcher import Match
from fxrules.match.safety import (
    AUTOCAST,
    GRAD_MODES,
    WRITERS,
    RuleChecks,
    SafetyCheck,
    Splice,
    checks_for,
    run_checks,
)
from fxrules.match.skips import Skip, SkipReason
from fxrules.memo import per_object
from fxrules.rewrite.aten import ATEN_GRAPH, Level, NoAtenSpelling, aten_name, graph_level, spelled
from fxrules.rewrite.read_only import read_only
from fxrules.rewrite.transaction import Transaction

#: Nodes in graph order (``Node._sort_key``), as ``sorted`` and ``min`` take a key.
_SORT_KEY = operator.attrgetter("_sort_key")
#: The checks one stage runs on a rewrite.
Checks = tuple[SafetyCheck, ...]
#: Metadata a replacement inherits from the output it replaces.
INHERITED_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "from_node")
SHAPE_META = ("val", "example_value", "tensor_meta")


class HelperTensor:
    """What a helper receives for a tensor capture other than a ``get_attr``: the node's name and metadata."""

    def __init__(self, node: torch.fx.Node) -> None:
        self.name = node.name
        self.node = node

    @property
    def shape(self) -> Any:
        return tensor_info(self.node).shape

    @property
    def dtype(self) -> torch.dtype:
        return tensor_info(self.node).dtype

    @property
    def value(self) -> torch.Tensor:
        """Unknown: a helper that needs it skips the rewrite (``get_attr`` captures reach helpers as tensors)."""
        where = "a graph input (as parameters are in torch.compile graphs and in subgraphs of higher-order " \
            "operators)" if self.node.op == "placeholder" else "computed when the graph runs"
        raise Skip(SkipReason.VALUE_UNKNOWN, f"a helper needs the value of '{self.name}', which is {where}")

    def __repr__(self) -> str:
        return f"HelperTensor({self.name})"


class Rewrite(NamedTuple):  # a tuple: one is made for every rewrite, and a frozen attrs class costs more
    """What one rewrite changed: the nodes it created and the nodes whose surroundings changed."""

    created: tuple[torch.fx.Node, ...]
    redirected: tuple[tuple[torch.fx.Node, Any], ...]  # existing nodes given a new input, and that input
    lost_users: tuple[torch.fx.Node, ...]  # existing nodes left with fewer users, still live
    gained_users: tuple[torch.fx.Node, ...]  # existing nodes the replacement uses

    @property
    def touched(self) -> tuple[torch.fx.Node, ...]:
        """The existing nodes whose surroundings changed: with new inputs, or fewer users."""
        return (*(user for user, _ in self.redirected), *self.lost_users)


#: ``Rewrite(*fields)`` without the Python frame of a named tuple's ``__new__`` (one is made for every rewrite)
_new_rewrite = tuple.__new__


class Rewriter:
    """Rewrites matches in one graph, calling helpers from ``helpers``."""

    def __init__(self, gm: torch.nn.Module, graph: torch.fx.Graph, helpers: Mapping[str, Callable[..., Any]],
                 transaction: Transaction, context: CallContext = TOP_LEVEL) -> None:
        self.gm = gm
        self.context = context  # how higher-order operators run the graph, when it is one of their subgraphs
        self.graph = graph
        self.helpers = helpers
        self.transaction = transaction
        self.with_metadata = any(has_metadata(n) for n in graph.find_nodes(op="placeholder"))
        self.effects = GraphEffects(graph)  # told of every node a rewrite creates or redirects
        self.autocast = autocast_regions(graph, context.autocast)
        self.splice = Splice(graph, transaction.retired, context.alias_free, _operation_name, self.effects)
        self._rules: dict[int, _PerRule] = {}  # id(rule) -> what every rewrite of it reads (:meth:`_per_rule`)

    @functools.cached_property
    def level(self) -> Level:
        """How replacements are spelled (:mod:`fxrules.rewrite.aten`; decided at the first rewrite, not per
        apply)."""
        return graph_level(self.gm, self.graph)

    @functools.cached_property
    def decomposed(self) -> Container[Any]:
        """Operators the graph's compiler has decomposed already, which a replacement may not bring back."""
        decomposed: Container[Any] = getattr(self.gm, "meta", {}).get(ATEN_GRAPH, ())
        return decomposed

    def rewrite(self, match: Match) -> Rewrite:
        """Splice the replacement of ``match`` in, or raise :class:`Skip` (leaving nothing behind) when building
        it meets something it cannot do or a safety check (:mod:`fxrules.match.safety`) refuses it."""
        outputs = match.outputs
        transaction = self.transaction
        splice = self.splice
        splice.refill(match, outputs[0] if len(outputs) == 1 else min(outputs, key=_SORT_KEY))
        per_rule = self._rules.get(id(match.rule)) or self._per_rule(match)
        # the checks of each stage the graph needs (:meth:`StageChecks.given`), by whether it may write in place
        writers = self.effects.writers_exist()
        checks = per_rule.emit[writers]
        if checks:
            run_checks(checks, splice)
        # a replacement of captures and literals makes no node (the Emitter makes a symbolic size a literal, or skips):
        # nothing to take back, so no mark but the first, which must come before any change (:meth:`Transaction.mark`)
        mark = transaction.mark(self.graph) if per_rule.shape.values is None or transaction.names is None else None
        try:  # a skip halfway (a helper's value unknown, no aten spelling...) leaves nothing behind
            values, created = splice.values, splice.created = self._emit(match, per_rule.shape, splice.anchor)
            splice.grad_modes, splice.autocast = self.grad_modes, self.autocast
            # one new node (most replacements that make any) without a comprehension: that is a call in itself
            writing = [node for node in created if may_write_in_place(node)] if len(created) > 1 else \
                created if created and may_write_in_place(created[0]) else ()
            checks = (per_rule.splice or self._splice_checks(per_rule))[writers or bool(writing)]
            if checks:
                run_checks(checks, splice)
        except Skip:
            if mark is not None:
                transaction.undo_since(mark, self.graph)
            raise
        if created:
            self._annotate(match, per_rule.provenance, created, values)
            if self.grad_modes is not None:  # new nodes are computed in the anchor's mode
                self.grad_modes.update(dict.fromkeys(created, self.grad_modes.get(splice.anchor, OUTSIDE)))
            if writing:
                self.effects.created_writers(writing)
        redirected: list[tuple[torch.fx.Node, Any]] = []
        noticed: list[torch.fx.Node] = []
        # one output (most rules) without a zip: a strict one costs as much as the rest of the loop
        for output, value in ((outputs[0], values[0]),) if len(outputs) == 1 else zip(outputs, values, strict=True):
            if value is not output:
                users = self._redirect(output, value, created)
                for user in users:  # a loop: a zip with a repeat, or a comprehension (a frame), costs more
                    redirected.append((user, value))
                if users and not isinstance(value, torch.fx.Node):  # a node for a node writes as it did; a
                    noticed += users                                 # literal may be an `inplace` flag (True)
        if noticed:  # told once all are redirected: a user of two outputs may get two literals
            self.effects.noticed(noticed)
        return _new_rewrite(Rewrite, (tuple(created), tuple(redirected), self._retire_dead(match),
                                      _used_by(created, values)))

    def _per_rule(self, match: Match) -> _PerRule:
        """What every rewrite of the rule of ``match`` reads (kept in ``_rules``, which :meth:`rewrite` asks
        first), found once per rewriter rather than once per rewrite
        (each is a :func:`~fxrules.memo.per_object` lookup, or a check of the graph).  Exact: each is derived from
        the rule alone, or from the rule and this graph (:meth:`RuleChecks.effects`: the same for each of its
        matches); keyed by id with the rule kept, so the id names that rule while the entry lives."""
        rule = match.rule
        checks = checks_for(rule)
        # the emit stage's facts: the regions are told to the splice stage only
        effects = checks.effects(match.nodes, self.effects)
        per_rule = self._rules[id(rule)] = _PerRule(
            rule, checks, _replacement_shape(rule), _provenance(rule), effects,
            (checks.emit.given(effects), checks.emit.given(effects | WRITERS)))
        return per_rule

    def _splice_checks(self, per_rule: _PerRule) -> tuple[Checks, Checks]:
        """The ``splice`` stage's checks of the rule where the replacement or the graph may write in place, and
        where neither may: found at the rule's first splice stage, once the regions are (:attr:`grad_modes` is
        read first there), which stay as they are for the rewriter's life."""
        facts = per_rule.effects | (GRAD_MODES if self.grad_modes is not None else 0) \
            | (AUTOCAST if self.autocast is not None else 0)
        found = per_rule.splice = (per_rule.checks.splice.given(facts), per_rule.checks.splice.given(facts | WRITERS))
        return found

    def _emit(self, match: Match, shape: _ReplacementShape,
              anchor: torch.fx.Node) -> tuple[list[Any], list[torch.fx.Node] | tuple[()]]:
        """The replacement's values (one per output) and the nodes made for them (``shape``: the rule's), before
        ``anchor``."""
        bindings = match.bindings
        if shape.capture is not None:  # x * 1 => x, the usual shape of the next one's
            value = bindings[shape.capture]
            if not isinstance(value, SYMBOLIC):  # exact: as below
                return [value], ()
        elif shape.values is not None:  # no node to insert
            values = [bindings[key] if is_capture else key for is_capture, key in shape.values]
            for value in values:  # exact: the Emitter gives each value as it is, but for a symbolic size
                if isinstance(value, SYMBOLIC):
                    break
            else:
                return values, ()
        elif shape.call is not None and self.level is Level.TORCH:
            node = shape.call.emit(self.graph, self.transaction, bindings, anchor)
            if node is not None:
                return [node], [node]
        emitter = Emitter(self, match)
        with self.graph.inserting_before(anchor):
            values = [emitter.emit(t) for t in match.rule.replacement]
        return values, emitter.created

    @functools.cached_property
    def grad_modes(self) -> dict[torch.fx.Node, bool | str] | None:
        """The grad mode of each node, where the graph has grad-mode regions (None: it has none)."""
        return grad_modes(self.graph, self.context.grad_enabled)

    def _annotate(self, match: Match, provenance: dict[str, Any], created: list[torch.fx.Node],
                  values: list[Any]) -> None:
        outputs = match.outputs
        anchor_meta = outputs[0].meta
        inherited = [(key, anchor_meta[key]) for key in INHERITED_META if key in anchor_meta] if anchor_meta else ()
        # the output each value replaces, by the value's identity: every value is alive, so no two share an id
        replaced_by = {id(values[0]): outputs[0]} if len(outputs) == 1 else \
            dict(zip(map(id, values), outputs, strict=True))
        for node in created:
            meta = node.meta
            meta.update(inherited)
            meta["fxrules"] = provenance.copy()
        for node in created:  # once all have provenance: inferring one reads the metadata of those it uses
            replaced = replaced_by.get(id(node))
            if replaced is not None:
                replaced_meta = replaced.meta
                # (a graph without metadata has empty dicts: asked first, as a comprehension is a call)
                shape = [(key, replaced_meta[key]) for key in SHAPE_META if key in replaced_meta] \
                    if replaced_meta else ()
                if shape:
                    node.meta.update(shape)
                    continue
            if self.with_metadata:
                with running(self.autocast, match.anchor):  # computed as it runs: autocast may cast it
                    infer_metadata(node)

    def _redirect(self, output: torch.fx.Node, value: Any, created: Collection[torch.fx.Node]) -> list[torch.fx.Node]:
        """Make the live users of ``output`` (but the replacement's own nodes) use ``value``; those users."""
        retired = self.transaction.retired
        users = output.users
        if retired.keys().isdisjoint(users) and (not created or users.keys().isdisjoint(created)):
            live = list(users)  # nearly every output: no user retired nor new (asked in C, not per user)
        else:
            live = [user for user in users if user not in retired and user not in created]
        self.transaction.redirect(output, value, live)
        return live

    def _retire_dead(self, match: Match) -> tuple[torch.fx.Node, ...]:
        """Retire the matched nodes nothing live uses any more, and the pure producers this leaves unused.

        Returns the nodes that lost a user and stay live.  A producer only the rewritten nodes used
        (the argument a ``...`` or ``_`` swallowed) is retired too, and so on up: left in place, it
        would count as a user of its own inputs, and block matches there, until the commit.
        """
        retired = self.transaction.retired
        nodes: Sequence[torch.fx.Node] = match.nodes
        if len(nodes) == 2:  # most matches of several nodes: in order, or swapped (no key list, no sort)
            if nodes[0]._sort_key < nodes[1]._sort_key:
                nodes = (nodes[1], nodes[0])
        elif len(nodes) > 2:
            nodes = sorted(nodes, key=_SORT_KEY, reverse=True)
        # a node's inputs as ``all_input_nodes`` lists them (a copy of the keys of FX's ``_input_nodes``), uncopied
        # ``users.keys() <= retired.keys()``: no live user (a test in C, of the users' keys first by number); the
        # view of ``retired`` made once: a view sees the nodes retired since
        lost_user: list[torch.fx.Node] = []
        retired_keys = retired.keys()
        for node in nodes:  # users before what they use
            if node.users.keys() <= retired_keys:
                lost_user += node._input_nodes
                retired[node] = None
        touched: list[torch.fx.Node] = []
        while lost_user:
            node = lost_user.pop()
            if node in retired:
                continue
            if not node.users.keys() <= retired_keys or self.effects.has_side_effects(node):
                touched.append(node)
            else:
                lost_user += node._input_nodes
                retired[node] = None
        return tuple(touched)


@attrs.define
class _PerRule:
    """What every rewrite of one rule reads (:meth:`Rewriter._per_rule`)."""

    rule: Rule  # kept: the key is its id
    checks: RuleChecks
    shape: _ReplacementShape
    provenance: dict[str, Any]
    effects: int  # EFFECTS when a match of the rule may have side effects here (:meth:`RuleChecks.effects`)
    #: the ``emit`` stage's checks where the graph may not write in place, and where it may (indexed by that bool)
    emit: tuple[Checks, Checks]
    splice: tuple[Checks, Checks] | None = None  # the same for the ``splice`` stage (:meth:`Rewriter._splice_checks`)


class Emitter:
    """Builds one replacement: each shared template once, helpers called at most once each."""

    def __init__(self, rewriter: Rewriter, match: Match) -> None:
        self.rewriter = rewriter
        self.match = match
        self.graph = rewriter.graph
        self.memo: dict[int, Any] = {}
        self.created: list[torch.fx.Node] = []

    def emit(self, template: Template) -> Any:
        if isinstance(template, Capture):
            value = self.match.bindings[template.name]
            return _size_literal(value, f"'{template.name}'") if isinstance(value, SYMBOLIC) else value
        if isinstance(template, Literal):
            return template.value
        if isinstance(template, SeqTemplate):
            items = [self.emit(i) for i in template.items]
            return tuple(items) if template.is_tuple else items
        if isinstance(template, SliceTemplate):
            return slice(self.emit(template.start), self.emit(template.stop), self.emit(template.step))
        if id(template) in self.memo:
            return self.memo[id(template)]
        if isinstance(template, HelperTemplate):
            value = self._helper_value(template)
        else:
            assert isinstance(template, OpTemplate)
            value = self._operation(template)
        self.memo[id(template)] = value
        return value

    def _operation(self, template: OpTemplate) -> Any:
        if template.target is getattr and self._module_capture(template.args[0]) is not None:
            return self._module_attribute(template)
        args = tuple(self._graph_value(self.emit(a)) for a in template.args)
        kwargs = {name: self._graph_value(self.emit(v)) for name, v in template.kwargs}
        kind, target = template.kind, template.target
        if _foldable(target, args, kwargs):  # e.g. `@rank(x) - 1`: arithmetic on literals is done now
            try:
                return bounded(target, *args)
            except LiteralTooLarge as error:
                raise Skip(SkipReason.LITERAL_BOUND, f"{template.span}: {error}") from None
            except ArithmeticError as error:  # `1.0 / c` where this match bound c = 0.0: not this match
                raise Skip(SkipReason.FOLD_ERROR, f"{template.span}: {type(error).__name__}: {error}") from None
        family = target if kind is OpKind.FAMILY else None
        if family is not None:
            kind, target = family.primary.kind, family.primary.target
        try:
            kind, target, args, kwargs = spelled(self.rewriter.level, family, kind, target, args, kwargs)
        except NoAtenSpelling as reason:
            raise Skip(SkipReason.NO_ATEN_SPELLING, f"{template.span}: {reason}") from reason
        if target in self.rewriter.decomposed:
            raise Skip(SkipReason.DECOMPOSED_OPERATOR,
                f"{template.span}: the compiler decomposes {target} before this pass; "
                "the replacement must use what it decomposes to")
        if kind is OpKind.MODULE:
            op, target = "call_module", self._module_name(template)
        else:
            op = "call_method" if kind is OpKind.METHOD else "call_function"
        node = self.rewriter.transaction.create_node(self.graph, op, target, args, kwargs)
        self.created.append(node)
        return node

    def _module_capture(self, template: Template) -> str | None:
        """The name of a module capture ``template`` is (``l`` of ``l.weight``), else None."""
        if isinstance(template, Capture) and isinstance(self.match.bindings.get(template.name), torch.nn.Module):
            return template.name
        return None

    def _module_attribute(self, template: OpTemplate) -> Any:
        """``l.weight`` of a captured module: a ``get_attr`` of that parameter or buffer (the existing tensor,
        not a copy), or the plain value of a data attribute (``l.in_features``, ``l.bias`` when it is None),
        read as guards read it: without running a property or ``__getattr__`` of the module."""
        name = self._module_capture(template.args[0])
        attribute = template.args[1]
        assert name is not None and isinstance(attribute, Literal)
        module = self.match.bindings[name]
        try:
            value = read_module_attribute(module, attribute.value)
        except UnreadableAttribute as error:
            raise FxrApplyError(f"{template.span}: {error}") from None
        if isinstance(value, torch.Tensor):
            node = self.rewriter.transaction.get_attr(self.graph, f"{self.match.modules[name]}.{attribute.value}")
            self.created.append(node)
            return node
        if isinstance(value, torch.nn.Module):
            raise FxrApplyError(f"{template.span}: '{name}.{attribute.value}' is a submodule; a replacement can "
                                "use a captured module's tensors and data attributes, not its submodules")
        return _size_literal(value, f"'{name}.{attribute.value}'")

    def _module_name(self, template: OpTemplate) -> str:
        if isinstance(template.target, HelperTemplate):
            module = self._call_helper(template.target)
            if not isinstance(module, torch.nn.Module):
                raise FxrApplyError(f"{template.span}: helper '@{template.target.name}' is called like a module "
                                    f"but returned {type(module).__name__}")
            return self.rewriter.transaction.add_module(template.target.name, module)
        if template.binds is not None:
            return self.match.modules[template.binds]
        raise FxrApplyError(f"{template.span}: {template.describe()} is a module family member and cannot be "
                            "emitted; make a function its first member")

    def _helper_value(self, template: HelperTemplate) -> Any:
        result = self._call_helper(template)
        if isinstance(result, torch.nn.Module):
            raise FxrApplyError(f"{template.span}: helper '@{template.name}' returned a module; call it, "
                                f"as in @{template.name}(...)(x)")
        if isinstance(result, torch.Tensor):
            refused = getattr(self.rewriter.gm, "meta", {}).get(NO_NEW_TENSORS)
            if refused:
                raise Skip(SkipReason.NO_NEW_TENSORS, f"helper '@{template.name}' returned a tensor, but {refused}")
            name = self.rewriter.transaction.add_buffer(template.name, result.detach())
            node = self.rewriter.transaction.get_attr(self.graph, name)
            self.created.append(node)
            return node
        return _printable(template, _size_literal(result, f"the result of helper '@{template.name}'"))

    def _call_helper(self, template: HelperTemplate) -> Any:
        function = self.rewriter.helpers[template.name]
        args = [self._helper_argument(self.emit(a)) for a in template.args]
        kwargs = {name: self._helper_argument(self.emit(v)) for name, v in template.kwargs}
        self.rewriter.transaction.keep_names(self.graph)  # a helper may name something in the graph
        try:
            with read_only(template.name, [*args, *kwargs.values()]):
                return function(*args, **kwargs)
        except Exception as error:
            if is_size_error(error):  # it read a symbolic size as a number: its result would bake the example's
                raise Skip.dynamic_size(dynamic_size(error, f"helper '@{template.name}'")) from None
            raise

    def _helper_argument(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            if value.op == "get_attr":
                return operator.attrgetter(str(value.target))(self.rewriter.gm)
            return HelperTensor(value)
        return value

    @staticmethod
    def _graph_value(value: Any) -> Any:
        if isinstance(value, torch.nn.Module):
            raise FxrApplyError("a module capture can be called or passed to a helper, not used as a value")
        return value



def _operation_name(node: torch.fx.Node) -> str | None:
    """The operation a node performs by aten name, its in-place and ``out=`` forms one (``add_``, ``add``)."""
    kind = {"call_method": OpKind.METHOD, "call_module": OpKind.MODULE}.get(node.op, OpKind.FUNCTION)
    name = aten_name(kind, node.target)
    return None if name is None else name.rstrip("_")


@per_object
def _provenance(rule: Rule) -> dict[str, Any]:
    """What ``meta["fxrules"]`` of a node the rule created says (each node gets its own copy)."""
    return {"rule": rule.name, "file": rule.file, "line": rule.span.line}


@attrs.frozen
class _ReplacementShape:
    """What kind of replacement a rule has, for the rewrites that need no :class:`Emitter`.

    ``values``: the replacement is made of captures and literals only (``x * 1 => x``), as
    (is a capture, capture name or literal value) per output.  ``call``: it is one function or
    method call of captures and literals (``torch.relu(torch.relu(x)) => torch.relu(x)``).
    Neither: anything else (nested calls, helpers, modules, lists, several outputs).
    """

    values: tuple[tuple[bool, Any], ...] | None = None
    call: _DirectCall | None = None
    capture: str | None = None  # the capture, when ``values`` is one capture


@attrs.frozen
class _DirectCall:
    """One call of captures and literals, emitted with ``Graph.create_node`` without an :class:`Emitter`."""

    op: str
    target: Any
    args: tuple[tuple[bool, Any], ...]  # (is a capture, capture name or literal value)
    kwargs: tuple[tuple[str, bool, Any], ...]
    foldable: bool  # an ``operator`` function: the Emitter folds it when every argument is a number

    def emit(self, graph: torch.fx.Graph, transaction: Transaction, bindings: Mapping[str, Any],
             before: torch.fx.Node) -> torch.fx.Node | None:
        """The new node, inserted before ``before``; None when the :class:`Emitter` must do it (a module value, a
        symbolic size, numbers to fold)."""
        args = tuple([bindings[key] if is_capture else key for is_capture, key in self.args])
        kwargs = {name: bindings[key] if is_capture else key for name, is_capture, key in self.kwargs} \
            if self.kwargs else {}  # (a comprehension is a frame, even of nothing)
        if self.foldable and _foldable(self.target, args, kwargs):
            return None
        # Exact: given no module (the Emitter says why that cannot be) and no symbolic size (it makes one a
        # literal or skips), the Emitter emits this very call: a function or method of these values, spelled as
        # written at the torch level, where no operator counts as decomposed (that needs ATEN_GRAPH).
        for value in args:
            if isinstance(value, _NOT_AS_IS):
                return None
        if kwargs:
            for value in kwargs.values():
                if isinstance(value, _NOT_AS_IS):
                    return None
        if getattr(graph.inserting_before, "__func__", None) is not _FX_INSERTING_BEFORE:  # a graph class's own
            with graph.inserting_before(before):
                return transaction.create_node(graph, self.op, self.target, args, kwargs)
        # FX's ``with graph.inserting_before(before)`` less its context manager's Python calls: the insertion point
        # set (``before`` is a node of this graph, as FX asserts), and put back however the creation ends
        insert, graph._insert = graph._insert, before.prepend
        try:
            return transaction.create_node(graph, self.op, self.target, args, kwargs)
        finally:
            graph._insert = insert


_FX_INSERTING_BEFORE = vars(torch.fx.Graph)["inserting_before"]


#: Bound values the :class:`Emitter` does not emit as they are: modules (an error) and symbolic sizes.
_NOT_AS_IS = (torch.nn.Module, *SYMBOLIC)


@per_object
def _replacement_shape(rule: Rule) -> _ReplacementShape:
    replacement = rule.replacement

    def plain(template: Template) -> tuple[bool, Any] | None:
        if isinstance(template, Capture):
            return True, template.name
        if isinstance(template, Literal):
            return False, template.value
        return None

    parts = [plain(t) for t in replacement]
    if all(part is not None for part in parts):
        capture = parts[0][1] if len(parts) == 1 and parts[0][0] else None  # type: ignore[index]
        return _ReplacementShape(values=tuple(parts), capture=capture)  # type: ignore[arg-type]
    if len(replacement) != 1 or not isinstance(replacement[0], OpTemplate):
        return _ReplacementShape()
    template = replacement[0]
    kind, target = template.kind, template.target
    if kind is OpKind.FAMILY:
        kind, target = target.primary.kind, target.primary.target
    args = [plain(t) for t in template.args]
    kwargs = [(name, plain(t)) for name, t in template.kwargs]
    if kind not in (OpKind.FUNCTION, OpKind.METHOD) or template.binds is not None or None in args \
            or any(part is None for _, part in kwargs):
        return _ReplacementShape()
    return _ReplacementShape(call=_DirectCall(
        op=kind.value, target=target, args=tuple(args),  # type: ignore[arg-type]
        kwargs=tuple((name, *part) for name, part in kwargs),  # type: ignore[misc]
        foldable=getattr(target, "__module__", None) == "_operator"))


def _used_by(created: list[torch.fx.Node] | tuple[()], values: list[Any]) -> tuple[torch.fx.Node, ...]:
    """The existing nodes a replacement uses: inputs of its new nodes, and outputs it reuses."""
    if len(values) == 1:
        value = values[0]
        if not created:  # most rewrites: one output, replaced by an existing value
            return (value,) if isinstance(value, torch.fx.Node) else ()
        if len(created) == 1 and value is created[0]:  # one new node for it: its inputs, each once already, are
            return tuple(value._input_nodes)           # existing (no node is its own input)
    used = [value for value in values if isinstance(value, torch.fx.Node)]
    if not created:
        return tuple(used)
    new = set(created)
    for node in created:
        used += node._input_nodes  # its inputs in order, as ``all_input_nodes`` lists them, uncopied
    return tuple([node for node in dict.fromkeys(used) if node not in new])


def _size_literal(value: Any, what: str) -> Any:
    """A value bound to the replacement, with symbolic sizes made literals (:func:`fxrules.graph.sizes.literal`), or a
    ``dynamic size`` skip."""
    try:
        return literal(value, what)
    except DynamicSize as dynamic:
        raise Skip.dynamic_size(dynamic) from None


def _foldable(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """An ``operator`` function applied to plain numbers only."""
    return (getattr(target, "__module__", None) == "_operator" and not kwargs
            and all(isinstance(a, int | float | bool) for a in args))


def _printable(template: HelperTemplate, value: Any) -> Any:
    """A helper's literal result must be one the generated code can spell; checked now, while undoable."""
    if isinstance(value, list | tuple):
        for item in value:
            _printable(template, item)
    elif not isinstance(value, PRINTABLE):
        raise FxrApplyError(f"{template.span}: helper '@{template.name}' returned {type(value).__name__}, which "
                            "cannot be inlined in generated code; return a module, a tensor or a Python literal")
    return value


#: Literal types FX code generation writes out faithfully.
PRINTABLE = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout, slice)
