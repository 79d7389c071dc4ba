"""What an ``apply`` did: per-rule counts, where rules fired, why matches were skipped, near misses.

:class:`ReportBuilder` accumulates while the engine runs; :class:`Report` is
the frozen result, printable as a table (``str(report)``) and exportable for
tools (``report.to_dict()``).
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from fxrules.lang.ir import Rule, RuleSet
from fxrules.match.matcher import Miss
from fxrules.match.skips import SkipReason

#: How many skipped matches and near misses a rule keeps (the counts are always complete).
KEEP_EXAMPLES = 20
KEEP_MISSES = 3


class StopReason(enum.Enum):
    """Why the passes of an ``apply`` ended; the value is what ``Report.to_dict()`` and the docs show.

    A run also ends when something fails (a helper raises, the result fails ``lint()``, Ctrl-C): then
    every change is undone and the error raised, and there is no report.
    """

    #: A pass fired nothing, or no node of the graph could anchor a rule: the rules are done.
    FIXPOINT = "fixpoint"
    #: Rules still fired in the pass after ``max_passes``: every change is undone and
    #: ``FxrConvergenceError`` raised; its ``report`` says what the passes did.
    PASS_LIMIT = "pass limit"


@attrs.frozen
class SkippedMatch:
    """A pattern that matched but could not be used, and why."""

    reason: SkipReason
    node: str
    detail: str


@attrs.frozen
class RuleReport:
    name: str
    location: str
    fired: int
    anchors: tuple[str, ...]
    skipped: tuple[SkippedMatch, ...]
    skip_counts: dict[str, int]
    notes: tuple[str, ...]
    near_misses: tuple[Miss, ...]
    # candidate nodes the rule was tried at: not the nodes pass 1 ruled out for the whole graph at once, nor
    # the settled nodes a later pass passes over
    attempts: int
    never_starts: str = ""  # with explain=True: why the rule cannot start a match in this graph (anchors.py)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "location": self.location, "fired": self.fired, "anchors": list(self.anchors),
            "skipped": [attrs.asdict(s) for s in self.skipped], "skip_counts": dict(self.skip_counts),
            "notes": list(self.notes), "attempts": self.attempts, "never_starts": self.never_starts,
            "near_misses": [{**attrs.asdict(m, filter=lambda a, _: a.name != "span"), "location": str(m.span)}
                            for m in self.near_misses],
        }


@attrs.frozen
class Report:
    """The result of one ``apply``."""

    rules: tuple[RuleReport, ...]
    passes: int
    stop_reason: StopReason
    nodes_before: int
    nodes_after: int
    match_seconds: float  # in the passes, rewrites aside: finding candidates, matching, bookkeeping
    rewrite_seconds: float  # splicing the replacements in (timed per rewrite)
    total_seconds: float

    @property
    def total_fired(self) -> int:
        return sum(r.fired for r in self.rules)

    def fired(self, rule_name: str) -> int:
        return self[rule_name].fired

    def __getitem__(self, rule_name: str) -> RuleReport:
        for rule in self.rules:
            if rule.name == rule_name:
                return rule
        raise KeyError(rule_name)

    def counts(self) -> dict[str, int]:
        """Rule name -> times fired, for the rules that fired."""
        return {r.name: r.fired for r in self.rules if r.fired}

    def to_dict(self) -> dict[str, Any]:
        return {
            "rules": [r.to_dict() for r in self.rules], "passes": self.passes,
            "stop_reason": self.stop_reason.value, "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after, "match_seconds": self.match_seconds,
            "rewrite_seconds": self.rewrite_seconds, "total_seconds": self.total_seconds,
        }

    def __str__(self) -> str:
        return self.table()

    def table(self, every_rule: bool = True) -> str:
        """The readable table; ``every_rule=False`` leaves out the rules that neither fired nor were skipped."""
        shown = [r for r in self.rules if every_rule or r.fired or r.skip_counts]
        width = max([len(r.name) for r in shown] + [4])
        lines = [f"{'rule':<{width}}  {'fired':>5}  {'skipped':>7}  where"]
        for rule in shown:
            where = ", ".join(rule.anchors[:4]) + (" ..." if len(rule.anchors) > 4 else "")
            lines.append(f"{rule.name:<{width}}  {rule.fired:>5}  {sum(rule.skip_counts.values()):>7}  {where}")
        lines.append(f"{counted(self.total_fired, 'rewrite')} in {counted(self.passes, 'pass')}; "
                     f"nodes {self.nodes_before} -> "
                     f"{self.nodes_after}; {self.total_seconds * 1000:.1f} ms"
                     + ("" if self.stop_reason is StopReason.FIXPOINT else f"; stopped: {self.stop_reason.value}"))
        lines += self._details()
        return "\n".join(lines)

    def _details(self) -> list[str]:
        lines: list[str] = []
        for rule in self.rules:
            for reason, count in sorted(rule.skip_counts.items()):
                example = next(s for s in rule.skipped if s.reason == reason)
                lines.append(f"  skipped {rule.name} x{count} ({reason}): {example.node}: {example.detail}")
            lines += [f"  note {rule.name}: {note}" for note in rule.notes]
            lines += [f"  near miss {miss}" for miss in rule.near_misses]
            if rule.never_starts:
                lines.append(f"  never starts {rule.name}: {rule.never_starts}")
        return lines


@attrs.define
class _RuleStats:
    anchors: list[str] = attrs.Factory(list)  # one per rewrite: the rule fired len(anchors) times
    skipped: dict[tuple[str, str], SkippedMatch] = attrs.Factory(dict)  # the first KEEP_EXAMPLES
    #: reason -> every node skipped for it, once however often seen; the reasons in the order first seen.  The
    #: counts by reason (:meth:`skip_counts`) are the sizes, found as the report is built, not counted at every
    #: skip; and a skip makes no (reason, node) key to hash
    skipped_at: dict[str, dict[str, None]] = attrs.Factory(dict)
    misses: list[Miss] = attrs.Factory(list)

    def skip_counts(self) -> dict[str, int]:
        """How many nodes were skipped for each reason, the reasons in the order first seen."""
        return {reason: len(nodes) for reason, nodes in self.skipped_at.items()}


#: The stats of a rule that did nothing (read only).
_NOTHING = _RuleStats()


@attrs.define
class ReportBuilder:
    """Accumulates what the engine saw, rule by rule."""

    ruleset: RuleSet
    stats: defaultdict[str, _RuleStats] = attrs.Factory(lambda: defaultdict(_RuleStats))  # of rules that did something
    passes: int = 0
    match_seconds: float = 0.0
    rewrite_seconds: float = 0.0
    attempts: defaultdict[str, int] = attrs.Factory(lambda: defaultdict(int))  # rule name -> nodes it was tried at
    never_starts: dict[str, str] = attrs.Factory(dict)  # rule name -> why it cannot start a match (explain=True)
    stop_reason: StopReason = StopReason.FIXPOINT

    def fired(self, rule: Rule, anchor: str) -> None:
        self.stats[rule.name].anchors.append(anchor)

    def skipped(self, rule: Rule, node: str, reason: SkipReason, detail: Callable[[], str]) -> None:
        """A match of ``rule`` at ``node`` not used for ``reason``; ``detail()`` is called if it is kept."""
        stats = self.stats[rule.name]
        seen = stats.skipped_at.get(reason)
        if seen is None:
            seen = stats.skipped_at[reason] = {}
        known = len(seen)
        seen[node] = None  # the name hashed once, to ask and to add
        if len(seen) == known:
            return
        if len(stats.skipped) < KEEP_EXAMPLES:
            stats.skipped[reason, node] = SkippedMatch(reason, node, detail())

    def keeps_miss(self, rule: str, anchor: str, progress: int, condition: str) -> bool:
        """Whether :meth:`missed` would keep such a miss (so its detail need not be written otherwise)."""
        misses = self.stats[rule].misses if rule in self.stats else []
        if any(m.anchor == anchor and m.condition == condition for m in misses):
            return False
        return len(misses) < KEEP_MISSES or progress > misses[-1].progress

    def missed(self, miss: Miss) -> None:
        if not self.keeps_miss(miss.rule, miss.anchor, miss.progress, miss.condition):
            return
        misses = self.stats[miss.rule].misses
        misses.append(miss)
        misses.sort(key=lambda m: -m.progress)
        del misses[KEEP_MISSES:]

    def build(self, nodes_before: int, nodes_after: int, total_seconds: float) -> Report:
        rules = []
        for rule in self.ruleset:
            stats = self.stats.get(rule.name, _NOTHING)
            rules.append(RuleReport(
                name=rule.name, location=str(rule.span), fired=len(stats.anchors), anchors=tuple(stats.anchors),
                skipped=tuple(stats.skipped.values()), skip_counts=stats.skip_counts(), notes=rule.notes,
                near_misses=tuple(stats.misses), attempts=self.attempts.get(rule.name, 0),
                never_starts=self.never_starts.get(rule.name, ""),
            ))
        return Report(tuple(rules), self.passes, self.stop_reason, nodes_before, nodes_after,
                      self.match_seconds, self.rewrite_seconds, total_seconds)


def combine(parts: Sequence[tuple[str, Report]], total_seconds: float) -> Report:
    """One report for an ``apply`` over a graph and the subgraphs of its higher-order operators.

    ``parts`` holds each graph's report under its attribute path (``""``: the module itself), in the order
    their rewrites are listed; a subgraph's nodes are named ``path.node``.  The run stopped at the pass
    limit if any graph's did.
    """
    root = parts[0][1]
    rules = []
    for index, rule in enumerate(root.rules):
        pieces = [(prefix, report.rules[index]) for prefix, report in parts]
        skip_counts: Counter[str] = Counter()
        for _, piece in pieces:
            skip_counts.update(piece.skip_counts)
        misses = sorted((attrs.evolve(m, anchor=_qualified(p, m.anchor)) for p, r in pieces for m in r.near_misses),
                        key=lambda m: -m.progress)
        rules.append(attrs.evolve(
            rule, fired=sum(r.fired for _, r in pieces),
            anchors=tuple(_qualified(p, a) for p, r in pieces for a in r.anchors),
            skipped=tuple(attrs.evolve(s, node=_qualified(p, s.node)) for p, r in pieces for s in r.skipped
                          )[:KEEP_EXAMPLES],
            skip_counts=dict(skip_counts), near_misses=tuple(misses[:KEEP_MISSES]),
            attempts=sum(r.attempts for _, r in pieces),
            # a rule that may start in some graph (a torch.cond branch) starts: the root's reason holds for it only
            never_starts=rule.never_starts if all(r.never_starts for _, r in pieces) else ""))
    reports = [report for _, report in parts]
    stop = next((r.stop_reason for r in reports if r.stop_reason is not StopReason.FIXPOINT), StopReason.FIXPOINT)
    return Report(tuple(rules), max(r.passes for r in reports), stop,
                  sum(r.nodes_before for r in reports), sum(r.nodes_after for r in reports),
                  sum(r.match_seconds for r in reports), sum(r.rewrite_seconds for r in reports), total_seconds)


def _qualified(prefix: str, node: str) -> str:
    return f"{prefix}.{node}" if prefix else node


def counted(number: int, noun: str) -> str:
    """``1 rule``, ``2 rules``, ``3 passes``: a count and its noun, in the plural unless it is one."""
    if number == 1:
        return f"1 {noun}"
    return f"{number} {noun}es" if noun.endswith("s") else f"{number} {noun}s"
