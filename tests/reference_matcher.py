"""A naive reference for the engine's matching: every rule at every node, no index, no early reject.

The differential tests and the semantics table compare the engine with this.
"""

from __future__ import annotations

import torch.fx

from fxrules.lang.ir import RuleSet
from fxrules.match.matcher import Matcher
from fxrules.match.skips import Skip

#: (rule name, anchor node name) -> names of the nodes the match covers.
Matches = dict[tuple[str, str], frozenset[str]]


def reference_matches(gm: torch.fx.GraphModule, ruleset: RuleSet) -> Matches:
    """Every usable match: ``Matcher.match`` at every (rule, node) pair; a :class:`Skip` is not a match."""
    found: Matches = {}
    for rule in ruleset:
        for node in gm.graph.nodes:
            try:
                match = Matcher(gm).match(rule, node)
            except Skip:
                continue
            if match is not None:
                found[rule.name, node.name] = frozenset(n.name for n in match.nodes)
    return found


def reference_anchors(gm: torch.fx.GraphModule, ruleset: RuleSet) -> set[tuple[str, str]]:
    """The (rule name, anchor node name) pairs of :func:`reference_matches`."""
    return set(reference_matches(gm, ruleset))


def predict_pass(gm: torch.fx.GraphModule, ruleset: RuleSet, matches: Matches | None = None) -> set[tuple[str, str]]:
    """What one pass fires if no rewrite changes any other match: greedy in graph order, rules in file order.

    At each node, the first rule (in file order) whose match shares no node
    with a match fired before fires.  This equals the engine's pass only when
    rewrites do not interact (e.g. graphs from ``strategies.site_graphs``).
    """
    matches = reference_matches(gm, ruleset) if matches is None else matches
    claimed: set[str] = set()
    fired: set[tuple[str, str]] = set()
    for node in gm.graph.nodes:
        if node.name in claimed:
            continue
        for rule in ruleset:
            covered = matches.get((rule.name, node.name))
            if covered is not None and not covered & claimed:
                claimed |= covered
                fired.add((rule.name, node.name))
                break
    return fired
