"""Why a rule can never start a match in a graph, for ``explain=True``.

A rule is tried only at nodes its first pattern output can stand at (its
anchor).  When no node of the graph is one, the rule fires 0 times and is
never even attempted, so it leaves no near miss to show; this module says
why instead: the anchor operation does not occur at this graph's level
(with the family or aten spelling that would match what the graph has), the
rule anchors at a submodule call in a graph that has none (Dynamo and
``torch.export`` inline modules), or the rule types its captures and the
graph has no shape metadata (every match would be skipped).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.fx

from fxrules.graph.metadata import has_metadata
from fxrules.lang.ir import AnchorKey, Family, OpKind, Rule, RuleSet, TensorType, anchor_keys, describe_target
from fxrules.lang.loader import prelude_families
from fxrules.match.matcher import node_keys
from fxrules.rewrite.aten import Level, aten_name, graph_level


def never_starts(gm: torch.nn.Module, graph: torch.fx.Graph, ruleset: RuleSet) -> dict[str, str]:
    """Rule name -> why it cannot start a match in ``graph``, for the rules that cannot."""
    keys = {key for node in graph.nodes for key in node_keys(gm, node)}
    modules = any(node.op == "call_module" and not _inlined_helper(gm, node) for node in graph.nodes)
    level = graph_level(gm, graph)
    typed_ok = any(has_metadata(n) for n in graph.find_nodes(op="placeholder"))
    found: dict[str, str] = {}
    for rule in ruleset:
        anchors = anchor_keys(rule.pattern[0])
        if anchors and keys.isdisjoint(anchors):
            found[rule.name] = _absent_anchor(anchors, keys, level, modules)
        elif not typed_ok and (typed := _typed_captures(rule)):
            found[rule.name] = (f"its captures {', '.join(typed)} are typed Tensor[...] and this graph has no shape "
                                "metadata, so every match is skipped (missing metadata); pass example_inputs= to "
                                "apply, or trace with torch.export or Dynamo")
    return found


def _inlined_helper(gm: torch.nn.Module, node: torch.fx.Node) -> bool:
    """``ExportedProgram.module()``'s ``_guards_fn`` call: not a submodule of the user's model."""
    try:
        return type(gm.get_submodule(str(node.target))).__name__ == "GuardsFn"
    except AttributeError:
        return True


def _typed_captures(rule: Rule) -> list[str]:
    return [name for name, kind in rule.types.items() if isinstance(kind, TensorType)]


def _absent_anchor(anchors: tuple[AnchorKey, ...], keys: set[AnchorKey], level: Level, modules: bool) -> str:
    if all(op == "call_module" for op, _ in anchors) and not modules:
        classes = " or ".join(f"nn.{target.__name__}" for _, target in anchors)
        return (f"its pattern starts at a call of a {classes} submodule, and this graph has no call_module nodes "
                f"(Dynamo and torch.export inline submodules){_suggestion(anchors, keys, level)}")
    written = " | ".join(describe_target(OpKind(op), target) for op, target in anchors)
    return f"its first operation ({written}) does not occur in this {level.value} graph" \
        f"{_suggestion(anchors, keys, level)}"


def _suggestion(anchors: tuple[AnchorKey, ...], keys: set[AnchorKey], level: Level) -> str:
    """A spelling of the anchor that does occur in the graph: a prelude family, else an aten overload packet."""
    targets = {target for _, target in anchors}
    for name, family in prelude_families().items():
        if targets & {m.target for m in family.members} and not keys.isdisjoint(_keys(family)):
            present = [str(m) for m in family.members if m.key in keys]
            return f"; the family {name}(...) also matches the {present[0]} it has"
    spelled = sorted({n for op, target in anchors if (n := aten_name(OpKind(op), target)) is not None})
    for operator_name in spelled:
        packet = getattr(torch.ops.aten, operator_name, None)
        if isinstance(packet, torch._ops.OpOverloadPacket) and ("call_function", packet) in keys:
            return f"; write aten.{operator_name}(...), which matches each of its overloads, as this graph spells it"
    aten = all(isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket) for target in targets)
    if level is not Level.TORCH and not aten:
        return "; an aten-level graph calls aten operators only: write the aten operator or a family with one"
    if level is Level.TORCH and aten:
        return "; a torch-level graph calls torch functions, methods and modules: write one, or a family"
    return ""


def _keys(family: Family) -> Iterable[AnchorKey]:
    return [member.key for member in family.members]
