"""A rule's pattern and replacement as two standalone FX graphs over the same inputs.

Each capture (and each ``_``) becomes a placeholder; module captures are
submodules of a shared root; an alternative ``A | B`` is built one option at
a time (:func:`alternative_choices`).  The replacement is emitted by the same
:class:`fxrules.rewrite.rewriter.Emitter` that ``apply`` uses, so verifying a rule
exercises the code that rewrites real graphs.  ``verify`` runs the two graphs
on generated inputs; the load-time loop check matches rules against them.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import torch
import torch.fx
from torch._library.utils import is_impure

from fxrules.lang.ir import (
    AltTemplate,
    Capture,
    HelperTemplate,
    Literal,
    ModuleType,
    OpKind,
    OpTemplate,
    Rule,
    Template,
    TensorType,
    Wildcard,
    children,
    pattern_templates,
    replacement_templates,
)
from fxrules.match.matcher import Match
from fxrules.memo import per_object
from fxrules.rewrite.rewriter import Emitter, Rewriter
from fxrules.rewrite.transaction import Transaction


@attrs.frozen
class Standalone:
    """The two graph modules of one rule, and the names of their inputs in order."""

    pattern: torch.fx.GraphModule
    replacement: torch.fx.GraphModule
    inputs: tuple[str, ...]
    interior: Mapping[str, torch.fx.Node]  # pattern-assigned names -> nodes of the pattern graph


@per_object  # asked for every graph built of the rule: for each example ``verify`` draws
def input_names(rule: Rule) -> tuple[str, ...]:
    """Captures that are graph inputs, ``_`` as ``_1, _2, ...``, in order of appearance.

    Module captures are submodules and ``Attr`` captures buffers of the root instead (see :func:`build`).
    """
    names: dict[str, None] = {}
    wildcards = 0
    constants = helper_tensors(rule)
    for template in pattern_templates(rule):
        if isinstance(template, Capture) and not isinstance(rule.types.get(template.name), ModuleType):
            if template.name not in constants:
                names[template.name] = None
        elif isinstance(template, Wildcard):
            wildcards += 1
            names[f"_{wildcards}"] = None
    for name in replacement_dims(rule):
        names[name] = None
    return tuple(names)


def replacement_dims(rule: Rule) -> tuple[str, ...]:
    """Symbolic dims of ``given`` types that the replacement uses as values (``[C]`` in F.layer_norm)."""
    symbols = {s for t in rule.types.values() if isinstance(t, TensorType) for s in t.symbols()}
    return tuple(dict.fromkeys(t.name for t in replacement_templates(rule)
                               if isinstance(t, Capture) and t.name in symbols))


@per_object
def attribute_names(rule: Rule) -> tuple[str, ...]:
    """The ``Attr`` captures and :func:`helper_tensors`: each a buffer of the standalone graphs' root."""
    attributes = [t.binds for t in pattern_templates(rule)
                  if isinstance(t, OpTemplate) and t.kind is OpKind.ATTR and t.binds]
    return tuple(dict.fromkeys([*attributes, *helper_tensors(rule)]))


def helper_tensors(rule: Rule) -> tuple[str, ...]:
    """Tensor captures the replacement passes to a helper.

    A helper computes with their values, which are known when rewriting only for
    attributes of the module (a parameter, a buffer): so they are buffers in the
    standalone graphs too, as they must be in a graph for the rule to fire.
    """
    tensors = {name for name, declared in rule.types.items() if isinstance(declared, TensorType)}
    return tuple(dict.fromkeys(a.name for t in replacement_templates(rule)
                               if isinstance(t, HelperTemplate) for a in children(t)
                               if isinstance(a, Capture) and a.name in tensors))


def alternative_choices(rule: Rule) -> list[dict[int, int]]:
    """Every way of picking one option of each ``A | B`` in the pattern (at most 16)."""
    alternatives = [t for t in pattern_templates(rule) if isinstance(t, AltTemplate)]
    choices = itertools.product(*(range(len(a.options)) for a in alternatives))
    return [dict(zip((id(a) for a in alternatives), combo, strict=True)) for combo in itertools.islice(choices, 16)]


class _PatternEmitter(Emitter):
    """Emits a pattern as a computation: one option per alternative, a placeholder per ``_``."""

    def __init__(self, rewriter: Rewriter, match: Match, choice: Mapping[int, int]) -> None:
        super().__init__(rewriter, match)
        self.choice = choice
        self.wildcards = iter(n for n in match.bindings if n.startswith("_"))

    def emit(self, template: Template) -> Any:
        if isinstance(template, AltTemplate):
            return self.emit(template.options[self.choice.get(id(template), 0)])
        if isinstance(template, Wildcard):
            return self.match.bindings[next(self.wildcards)]
        return super().emit(template)


def _root(constants: Mapping[str, torch.nn.Module | torch.Tensor]) -> torch.nn.Module:
    root = torch.nn.Module()
    for name, value in constants.items():
        if isinstance(value, torch.nn.Module):
            root.add_module(name, value)
        elif value is not None:
            root.register_buffer(name, value)
    return root


def build_pattern(rule: Rule, constants: Mapping[str, torch.nn.Module | torch.Tensor],
                  choice: Mapping[int, int] | None = None) -> tuple[torch.fx.GraphModule, Mapping[str, torch.fx.Node]]:
    """The pattern graph alone, and its named interior nodes."""
    root = _root(constants)
    graph = torch.fx.Graph()
    outputs, match = _emit_pattern(rule, root, graph, {}, choice or {})
    graph.output(_pack(outputs))
    interior = {name: node for name, node in match.bindings.items()
                if isinstance(node, torch.fx.Node) and node.op not in ("placeholder", "get_attr")}
    return torch.fx.GraphModule(root, graph), interior


@attrs.frozen
class PatternGraph:
    """A rule's pattern graph for one choice of its alternatives, without constants of its own: it runs on
    each example's module captures and ``Attr`` tensors through :class:`ConstantsInterpreter`."""

    module: torch.fx.GraphModule
    interior: Mapping[str, torch.fx.Node]  # pattern-assigned names -> nodes of the graph


class PatternGraphs:
    """The pattern graphs of one rule's choice of alternatives, each built once and reused for every example.

    The graph depends on the example only through which ``Attr`` captures are absent (drawn as None, they are
    the literal None in the graph, as an omitted bias is): one graph is built for each such set.
    """

    def __init__(self, rule: Rule, choice: Mapping[int, int] | None = None) -> None:
        self.rule = rule
        self.choice = choice or {}
        self.attributes = attribute_names(rule)
        self.modules = tuple(name for name, t in rule.types.items() if isinstance(t, ModuleType))
        self.built: dict[frozenset[str], PatternGraph] = {}

    def get(self, constants: Mapping[str, torch.nn.Module | torch.Tensor | None]) -> PatternGraph:
        """The graph for ``constants`` (each example's, or some of them: absent means None)."""
        absent = frozenset(name for name in self.attributes if constants.get(name) is None)
        if absent not in self.built:
            # stand-ins: the graph reads its constants from the interpreter, never from its root
            stand_ins: dict[str, torch.nn.Module | torch.Tensor] = {name: torch.nn.Identity() for name in self.modules}
            stand_ins.update({name: torch.empty(0) for name in self.attributes if name not in absent})
            self.built[absent] = PatternGraph(*build_pattern(self.rule, stand_ins, self.choice))
        return self.built[absent]


class ConstantsInterpreter(torch.fx.Interpreter):
    """Runs a standalone graph with its module captures and ``Attr`` tensors taken from ``constants``, not
    from its root: one graph serves every example."""

    def __init__(self, graph: torch.fx.GraphModule, constants: Mapping[str, Any]) -> None:
        super().__init__(graph)
        self.constants = constants

    def fetch_attr(self, target: str) -> Any:
        return self.constants[target]


def build_replacement(rule: Rule, constants: Mapping[str, torch.nn.Module | torch.Tensor],
                      helpers: Mapping[str, Callable[..., Any]], choice: Mapping[int, int] | None = None,
                      inputs: Mapping[str, Any] | None = None) -> torch.fx.GraphModule:
    """The replacement graph; ``inputs`` (example values) give its placeholders metadata for helpers to read."""
    root, graph = replacement_graph(rule, constants, helpers, choice, inputs)
    return torch.fx.GraphModule(root, graph)


def replacement_graph(rule: Rule, constants: Mapping[str, torch.nn.Module | torch.Tensor],
                      helpers: Mapping[str, Callable[..., Any]], choice: Mapping[int, int] | None = None,
                      inputs: Mapping[str, Any] | None = None) -> tuple[torch.nn.Module, torch.fx.Graph]:
    """The replacement's graph and the root module it calls, without generating its code (the load-time
    loop check only matches rules against its nodes).  The pattern is computed first only when the
    replacement could differ without it (:func:`pattern_vanishes`)."""
    root = _root(constants)
    graph = torch.fx.Graph(owning_module=root)  # type: ignore[arg-type]  # what dead-code removal asks about modules
    if pattern_vanishes(rule):
        pattern_match = _inputs_match(rule, root, _pattern_inputs(rule, root, graph))
    else:  # the replacement may reuse interior pattern nodes: compute them again in its graph, then emit it
        _, pattern_match = _emit_pattern(rule, root, graph, helpers, choice or {})
    for name, value in (inputs or {}).items():
        node = pattern_match.bindings.get(name)
        if not isinstance(node, torch.fx.Node) or node.op != "placeholder":
            continue
        if isinstance(value, torch.Tensor):
            node.meta["val"] = value
        elif not (isinstance(value, list | tuple) and any(isinstance(v, torch.Tensor) for v in value)):
            # a literal, as apply binds it: helpers see the value
            pattern_match = attrs.evolve(pattern_match, bindings={**pattern_match.bindings, name: value})
    emitter = Emitter(Rewriter(root, graph, helpers, Transaction(root)), pattern_match)
    graph.output(_pack([emitter.emit(t) for t in rule.replacement]))
    _without_dead_code(graph)  # the interior nodes the replacement did not reuse
    return root, graph


def _without_dead_code(graph: torch.fx.Graph) -> None:
    """``graph.eliminate_dead_code()``, which only lints a graph where every node but the placeholders and the
    output has a user and none reads an attribute (the only place it looks into submodules): most replacement
    graphs, so the scan of every node for impurity is left out there."""
    if graph.find_nodes(op="get_attr") or any(
            not node.users and node.op not in ("placeholder", "output") for node in graph.nodes):
        graph.eliminate_dead_code()
    else:
        graph.lint()


def build(rule: Rule, constants: Mapping[str, torch.nn.Module | torch.Tensor],
          helpers: Mapping[str, Callable[..., Any]], choice: Mapping[int, int] | None = None,
          inputs: Mapping[str, Any] | None = None) -> Standalone:
    """Build the rule's pattern and replacement graphs.

    ``constants`` holds each module capture (a submodule of the root) and each ``Attr`` capture (a buffer).
    """
    pattern, interior = build_pattern(rule, constants, choice)
    replacement = build_replacement(rule, constants, helpers, choice, inputs)
    return Standalone(pattern, replacement, input_names(rule), interior)


def _pattern_inputs(rule: Rule, root: torch.nn.Module, graph: torch.fx.Graph) -> dict[str, Any]:
    """The pattern's captures bound to the graph's inputs: placeholders, buffers and submodules."""
    bindings: dict[str, Any] = {name: _placeholder(graph, name) for name in input_names(rule)}
    # an attribute drawn as None (``Tensor[O] | None``) is the literal None, as an omitted bias is in a graph
    bindings.update({name: graph.get_attr(name) if getattr(root, name, None) is not None else None
                     for name in attribute_names(rule)})
    bindings.update({name: getattr(root, name) for name, _ in root.named_children()})
    return bindings


def _inputs_match(rule: Rule, root: torch.nn.Module, bindings: dict[str, Any]) -> Match:
    """A match of ``bindings``, the root's submodules its modules."""
    return Match(rule, (), (), bindings, {name: name for name, _ in root.named_children()})


def _emit_pattern(rule: Rule, root: torch.nn.Module, graph: torch.fx.Graph,
                  helpers: Mapping[str, Callable[..., Any]], choice: Mapping[int, int]) -> tuple[list[Any], Match]:
    bindings = _pattern_inputs(rule, root, graph)
    match = _inputs_match(rule, root, bindings)
    emitter = _PatternEmitter(Rewriter(root, graph, helpers, Transaction(root)), match, choice)
    for template in pattern_templates(rule):
        if isinstance(template, OpTemplate) and template.kind is OpKind.ATTR:
            emitter.memo[id(template)] = bindings[template.binds]  # type: ignore[index]
    outputs = [emitter.emit(t) for t in rule.pattern]
    for template in pattern_templates(rule):
        if isinstance(template, OpTemplate) and template.name and id(template) in emitter.memo:
            bindings[template.name] = emitter.memo[id(template)]
    return outputs, match


@per_object
def pattern_vanishes(rule: Rule) -> bool:
    """Whether the replacement graph is the same without the pattern emitted first, so it need not be: the
    replacement reuses no node the pattern names, and every pattern node would be dead code that emitting
    could neither fail on nor keep, nor let change how the replacement is spelled.

    That holds when every operation of the pattern is a method call, or a call of a function that is not an
    aten operator (one would make the graph aten-level, :func:`fxrules.rewrite.aten.graph_level`), not
    ``getattr`` (of a module capture it reads the module), not an ``operator`` function (on literals it is
    folded, and may fail) and not impure (FX's dead-code removal keeps it); a family counts as its first
    member, the one it is emitted as.  Module calls, module captures as values and ``Attr`` reads take the
    whole path.  Only the names FX gives the replacement's nodes differ (``relu``, not ``relu_1``).
    """
    named: set[str] = set()
    for template in pattern_templates(rule):
        if isinstance(template, HelperTemplate) or (
                isinstance(template, Capture) and isinstance(rule.types.get(template.name), ModuleType)):
            return False
        if isinstance(template, OpTemplate):
            if not dead_as_emitted(template):
                return False
            if template.name:
                named.add(template.name)
    return not any(isinstance(t, Capture) and t.name in named for t in replacement_templates(rule))


#: Dispatcher operators, which make a graph aten-level, and higher-order ones, whose purity their arguments decide.
_OPERATORS = (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)


def dead_as_emitted(template: OpTemplate) -> bool:
    """Whether the pattern emitter writes ``template`` as a node FX's dead-code removal drops when unused."""
    kind, target = template.kind, template.target
    if kind is OpKind.FAMILY:
        kind, target = target.primary.kind, target.primary.target
    if kind is OpKind.METHOD:
        return True  # FX keeps no unused method call
    return (kind is OpKind.FUNCTION and _dead_call(target)
            and (getattr(target, "__module__", None) != "_operator" or never_folds(template)))


@functools.cache
def _dead_call(target: Callable[..., Any]) -> bool:
    """Whether an unused call_function node of ``target`` is dead code: not ``getattr``, no dispatcher or
    higher-order operator, and not what ``Node.is_impure`` counts impure (its arguments matter only for
    higher-order operators, which take the whole path; random functions count as impure, as dead-code removal
    may count them).  Cached: FX hashes every node's target, so each target can be a key."""
    return target is not getattr and not isinstance(target, _OPERATORS) and not is_impure(target)


@per_object  # a pattern's alternatives share templates: a walk unmemoized would take 2 ** depth steps
def never_folds(template: OpTemplate) -> bool:
    """Whether an ``operator`` function of the pattern is emitted as a node, never folded (the emitter folds
    one whose arguments are all numbers): it has keywords, or an argument that is never a number."""
    return bool(template.kwargs) or any(_never_a_number(argument) for argument in template.args)


@per_object
def _never_a_number(template: Template) -> bool:
    """Whether the pattern emitter never makes ``template`` a number: a capture or ``_`` is a placeholder (or
    None, an ``Attr`` drawn absent), a sequence a list, an operation a node unless it is ``operator``
    arithmetic that folds."""
    if isinstance(template, Literal):
        return not isinstance(template.value, int | float | bool)
    if isinstance(template, AltTemplate):
        return all(_never_a_number(option) for option in template.options)
    if isinstance(template, OpTemplate):
        target = template.target.primary.target if template.kind is OpKind.FAMILY else template.target
        return getattr(target, "__module__", None) != "_operator" or never_folds(template)
    return True


def _placeholder(graph: torch.fx.Graph, capture: str) -> torch.fx.Node:
    """The input of ``capture``, its parameter in the generated code named as FX names nodes (never a keyword
    or a builtin): a capture may be called ``lambda``, ``self`` or ``getattr``."""
    node = graph.placeholder("self_" if capture == "self" else capture)
    node.target = node.name
    return node


def _pack(outputs: list[Any]) -> Any:
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
