"""Load-time warnings for rules that would fire forever.

Each rule's replacement is built as a standalone graph (captures as
placeholders) and every rule is matched against its nodes.  A rule whose
pattern matches its own replacement, and two rules each matching the
other's replacement, are reported before anything loops.  Where the match
cannot be decided without shape metadata or module values (a typed capture,
a guard), the pattern's operations alone decide, the types and the guard
assumed to hold: the matcher skips such a match for ``missing metadata`` or
``guard error`` only once its structure matched, so the skip counts as a
match.  The warning is a prompt to check, not a verdict.  Rules
whose replacement calls a helper are not checked (helpers run only on real
modules).
"""

from __future__ import annotations

import torch
import torch.fx

from fxrules.diagnostics import Diagnostic, Span
from fxrules.ir import HelperTemplate, ModuleType, OpTemplate, Rule, RuleSet, walk
from fxrules.matcher import Matcher, RuleIndex, Skip
from fxrules.standalone import build

#: Skip reasons that depend on values a standalone graph does not have.
UNDECIDED = frozenset({"missing metadata", "guard error"})


def _replacement_graph(rule: Rule) -> torch.fx.GraphModule | None:
    uses_helper = any(isinstance(t, HelperTemplate) or (isinstance(t, OpTemplate) and isinstance(t.target,
                      HelperTemplate)) for output in rule.replacement for t in walk(output))
    if uses_helper:
        return None
    modules = {name: torch.nn.Identity() for name, t in rule.types.items() if isinstance(t, ModuleType)}
    try:
        return build(rule, modules, {}).replacement
    except Exception:  # a replacement that cannot be built symbolically is not checked
        return None


def _rules_matching(graph: torch.fx.GraphModule, ruleset: RuleSet) -> set[str]:
    index = RuleIndex(graph, ruleset)
    matcher = Matcher(graph)
    found: set[str] = set()
    for node in graph.graph.nodes:
        for rule in index.rules_at(node):
            try:
                if matcher.match(rule, node) is not None:
                    found.add(rule.name)
            except Skip as skip:
                if skip.reason in UNDECIDED:
                    found.add(rule.name)
    return found


def loop_warnings(ruleset: RuleSet) -> tuple[Diagnostic, ...]:
    """Warnings for self-matching rules and pairs of rules that undo each other."""
    matches: dict[str, set[str]] = {}
    for rule in ruleset:
        graph = _replacement_graph(rule)
        if graph is not None:
            matches[rule.name] = _rules_matching(graph, ruleset)
    by_name = {rule.name: rule for rule in ruleset}
    found = []
    for name, matched in matches.items():
        span = by_name[name].span
        if name in matched:
            found.append(_warning(span, f"rule {name}: its pattern matches its own replacement, so it may fire "
                                        "forever", "apply stops at max_passes with an error"))
        for other in sorted(matched - {name}):
            if name < other and name in matches.get(other, set()):
                found.append(_warning(span, f"rules {name} and {other} undo each other, so they may fire forever",
                                      f"{other} is at {by_name[other].span}"))
    return tuple(found)


def _warning(span: Span, message: str, hint: str) -> Diagnostic:
    return Diagnostic(span, message, hint=hint, severity="warning")
