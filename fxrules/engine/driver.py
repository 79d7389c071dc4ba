"""``apply``: the driver that runs a rule set over a graph module in passes, all or nothing.

1. Check the inputs; load the rules; check every helper a rule calls exists.
2. Run passes on the graph itself, every change logged in a
   :class:`~fxrules.rewrite.transaction.Transaction`.  A pass visits its candidate
   nodes in graph order; at each node the rules indexed under its key are
   tried in file order and the first match is rewritten at once.  Nodes a
   rewrite creates are not matched again in the same pass.  Pass 1 visits the
   nodes the graph's own op/target index finds for the rules' anchor keys,
   narrowed for compiled rules to those whose operand calls and literals may
   match, all found at once as the pass starts
   (:attr:`~fxrules.match.compiled.CompiledRule.candidates`), and the nodes ahead
   that its rewrites give new inputs (and their users within pattern depth),
   which they may have made candidates (``_Run._wake``): so it finds what a
   visit of every anchor node would.  Later passes visit only the nodes
   within pattern depth (along use edges) of what the previous pass changed,
   narrowed the same way, and the nodes beyond that their own rewrites may
   have given a match (``_Run._wake_beyond_domain``); until they first fire
   they pass over those the previous pass looked at after every change within
   their reach (``_Run._settled``).  Rules are matched by their compiled matchers
   (:mod:`fxrules.match.compiled`), which reject most candidates before binding
   any argument; ``explain=True`` attaches a tracer to them and visits the same
   nodes (the near misses where narrowing left a node out are traced apart).  If nothing fires, the graph is
   left exactly as it was (and is not even linted).
3. At a fixpoint, commit: lint, erase the retired nodes and other dead code,
   recompile, and delete the submodules and buffers the rewrite left
   unreferenced; each step logged in the same undo log.  Any failure, at any
   point (a ``KeyboardInterrupt`` too), undoes the log from wherever it
   stopped: the graph, its nodes (their users in order), the generated code
   and the module's attributes are as they were.  A graph that fails lint is
   reported as broken before fxrules touched it when, undone, it still fails.
   The subgraphs of higher-order operators are rewritten and committed the
   same way, innermost first, all or nothing with the module.

Cost: one index lookup per visited node, plus the matching of the rules
filed under that node's key: ``O(candidates x pattern size)``; no copy of
the graph is made.
"""

from __future__ import annotations

import functools
import heapq
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import attrs
import torch
import torch.fx
from torch.export import ExportedProgram

from fxrules.diagnostics import FxrApplyError, FxrConvergenceError, FxrError, FxrUsageError
from fxrules.engine.anchors import never_starts
from fxrules.engine.exported import RewrittenProgram, rewrite_program
from fxrules.engine.loading import load
from fxrules.engine.report import Report, ReportBuilder, combine
from fxrules.engine.shape_propagation import check_example_inputs, propagate_shapes
from fxrules.graph.metadata import has_side_effects
from fxrules.graph.sizes import fixed
from fxrules.graph.subgraphs import TOP_LEVEL, CallContext, higher_order_subgraphs
from fxrules.lang.ir import Rule, RuleSet
from fxrules.match.compiled import CompiledRule, compile_ruleset
from fxrules.match.guards import Predicates, predicate_table, unknown_predicate, using_predicates
from fxrules.match.matcher import Match, Matcher, Miss, NodeIndex, Nodes, RuleIndex, in_graph_order
from fxrules.match.narrowing import Candidates, Satisfiers
from fxrules.match.skips import Skip, SkipReason
from fxrules.rewrite import helpers as bundled_helpers
from fxrules.rewrite.rewriter import Rewrite, Rewriter
from fxrules.rewrite.transaction import Transaction

RulesArgument = str | Path | RuleSet | Sequence["str | Path | RuleSet"]
#: ``only=``/``exclude=``: a rule name or glob pattern, or several (:meth:`RuleSet.select`).
Selection = str | Iterable[str] | None


def load_rules(rules: RulesArgument, allow: Iterable[str] = ()) -> RuleSet:
    """Turn the ``rules`` argument of ``apply`` (path, bundled name, RuleSet, or a list of them) into one RuleSet."""
    if isinstance(rules, RuleSet):
        return rules
    if isinstance(rules, str | Path):
        return load(rules, allow)
    if isinstance(rules, list | tuple) and rules:
        parts = [load_rules(r, allow) for r in rules]
        combined = parts[0]
        for part in parts[1:]:
            combined = combined + part
        return combined
    raise FxrUsageError(
        f"rules must be a path, a bundled ruleset name such as 'algebra.fxr', a RuleSet, or a list of these; "
        f"got {type(rules).__name__}"
    )


def _check_module(gm: Any) -> torch.fx.GraphModule:
    if isinstance(gm, torch.fx.GraphModule):
        return gm
    if isinstance(gm, torch.nn.Module):
        raise FxrUsageError(
            f"apply needs a torch.fx.GraphModule, got the plain module {type(gm).__name__}: "
            "trace it first, e.g. gm = torch.fx.symbolic_trace(model)"
        )
    raise FxrUsageError(f"apply needs a torch.fx.GraphModule, got {type(gm).__name__}")


def _helper_table(ruleset: RuleSet,
                  user_helpers: Mapping[str, Callable[..., Any]] | None) -> dict[str, Callable[..., Any]]:
    table = {**bundled_helpers.BUNDLED, **(user_helpers or {})}
    for rule, helper in compile_ruleset(ruleset).helper_calls:
        if helper.name not in table:
            raise FxrApplyError(
                f"{helper.span}: rule {rule.name} calls unknown helper '@{helper.name}'; bundled helpers "
                f"are {', '.join(sorted(bundled_helpers.BUNDLED))}; pass others with helpers={{...}}"
            )
    return table


def checked_options(ruleset: RuleSet, helpers: Mapping[str, Callable[..., Any]] | None,
                    max_passes: int, predicates: Predicates | None = None) -> dict[str, Callable[..., Any]]:
    """Check ``apply``'s options against the rules before any graph is touched; the helpers by name."""
    if max_passes < 1:
        raise FxrUsageError(f"max_passes must be at least 1, got {max_passes}")
    unknown = unknown_predicate(ruleset, predicate_table(predicates))
    if unknown is not None:
        raise FxrApplyError(unknown)
    return _helper_table(ruleset, helpers)


@attrs.define
class _Pass:
    """One pass's state: what fired, the nodes rewrites created (not matched again) and the changed nodes the
    next pass must look around (``touched``).

    Positions count the nodes the pass visited: ``visited`` says where the pass looked at a node (tried
    its rules, or knew their outcome), ``changed`` where the last rewrite that changed a node's inputs
    or users happened.

    The pass visits its candidates, narrowed when it started, and the nodes of its ``domain`` (None:
    any node a rule may anchor at) that a rewrite of the pass may have made candidates since: those
    whose inputs it changed, and their users within pattern depth, still ahead in graph order
    (``woken``, a heap by graph position).
    """

    matcher: Matcher
    rewriter: Rewriter
    listed: set[torch.fx.Node]
    domain: set[torch.fx.Node] | None
    woken: list[tuple[Any, int, torch.fx.Node]] = attrs.Factory(list)
    node: torch.fx.Node | None = None  # being visited
    fired: set[str] = attrs.Factory(set)
    claimed: set[torch.fx.Node] = attrs.Factory(set)
    touched: set[torch.fx.Node] = attrs.Factory(set)
    position: int = 0  # of the candidate being visited
    visited: dict[torch.fx.Node, int] = attrs.Factory(dict)
    changed: dict[torch.fx.Node, int] = attrs.Factory(dict)
    overlapped: set[torch.fx.Node] = attrs.Factory(set)  # where a match overlapped what this pass created


@attrs.define
class _Rewritten:
    """A graph rewritten to its fixpoint but not committed: the undo log, and what the report needs."""

    transaction: Transaction
    fired: bool
    nodes_before: int
    started: float


class _Run:
    """One ``apply``: the passes over a working copy, then the commit."""

    def __init__(self, gm: torch.fx.GraphModule, ruleset: RuleSet, helpers: Mapping[str, Callable[..., Any]],
                 max_passes: int, explain: bool, context: CallContext = TOP_LEVEL, static_shapes: bool = False,
                 on_rewrite: Callable[[Match], None] | None = None,
                 accept: Callable[[Match], bool] | None = None) -> None:
        self.gm = gm
        self.on_rewrite = on_rewrite  # one_pass: sees each match rewritten, and the run stops after one pass
        self.accept = accept  # one_pass: a match it refuses is skipped ('filtered')
        self.static_shapes = static_shapes  # a rule may specialize the graph to its metadata's example sizes
        self.context = context  # how higher-order operators run the graph, when it is one of their subgraphs
        self.ruleset = ruleset
        self.helpers = helpers
        self.max_passes = max_passes
        self.explain = explain
        self.report = ReportBuilder(ruleset)
        if explain:
            self.report.never_starts = never_starts(gm, gm.graph, ruleset)
        self.index = RuleIndex(gm, ruleset)
        compiled = compile_ruleset(ruleset)
        self.compiled: Mapping[int, CompiledRule] = compiled.matchers
        # id(rule) -> its compiled matcher's cheap test at a node the index filed under the rule (absent: none)
        self.anchor_tests = {key: m.may_match_anchor for key, m in self.compiled.items()
                             if m.may_match_anchor is not None}
        self.depth = compiled.depth
        self._satisfiers_by_key: dict[tuple[str, Any], Satisfiers | None] = {}
        self.multi_output = compiled.multi_output
        # Whether a pass may skip the nodes whose outcome the previous pass knows (see _settled).
        self.counts_users = compiled.counts_users
        self.settles = not (compiled.multi_output or compiled.counts_users)

    def begin(self) -> _Rewritten:
        """The undo log of this run, made before anything changes (the caller keeps it to undo what follows)."""
        return _Rewritten(Transaction(self.gm), False, len(self.gm.graph.nodes), time.perf_counter())

    def rewrite(self, rewritten: _Rewritten) -> None:
        """The passes, every change logged in ``rewritten`` and none committed yet."""
        graph = self.gm.graph
        found = Candidates(graph)
        candidates = self.index.candidates(found, self._narrowing(found))
        if self.explain:
            self._explain_passed_over(Matcher(self.gm, explain=True), candidates, None)
        if not candidates:  # no node any rule can anchor at: one pass that finds nothing, and nothing to undo
            self.report.passes = 1
            self.report.match_seconds = time.perf_counter() - rewritten.started
            return
        with fixed(self.gm, self.static_shapes):
            rewritten.fired = self._passes(graph, candidates, rewritten.transaction)

    def _narrowing(self, found: Candidates,
                   among: set[torch.fx.Node] | None = None) -> Callable[[Rule], Nodes | None]:
        """The nodes of ``found.graph`` (``among`` them) where a rule may match at most, by its compiled matcher
        (None: any node of its anchor keys); ``found`` is shared by the rules (operands' candidates, nodes by key)."""

        def narrowed(rule: Rule) -> Nodes | None:
            return self.compiled[id(rule)].candidates(found, among)

        return narrowed

    def commit(self, rewritten: _Rewritten, path: str) -> None:
        """Commit what :meth:`rewrite` did (nothing, if nothing fired), every step logged for :meth:`undo`:
        lint, erase the retired nodes and other dead code, recompile, delete what is no longer used."""
        if not rewritten.fired:
            return
        graph, transaction = self.gm.graph, rewritten.transaction
        try:
            graph.lint()
        except Exception as error:
            raise _LintError(graph, f"{path}: {error}" if path else str(error)) from error
        try:
            self._erase_and_recompile(transaction)
        except Exception as error:  # code generation, recompiling, deleting: nothing a rule could check
            raise FxrApplyError(_commit_failure(graph, path, error)) from error

    def _erase_and_recompile(self, transaction: Transaction) -> None:
        gm, graph = self.gm, self.gm.graph
        referenced_before = {str(n.target) for n in graph.find_nodes(op="call_module")}
        transaction.erase_dead(graph, _removable(transaction.retired))
        transaction.recompile(gm)
        referenced_after = {str(n.target) for n in graph.find_nodes(op="call_module")}
        unreferenced = referenced_before - referenced_after
        added_buffers = [name for name in transaction.added if name in gm._buffers]
        if unreferenced or added_buffers:
            still_used = _used_attribute_paths(gm, graph)
            for name in sorted(unreferenced - still_used):
                transaction.delete_submodule(gm, name)
            for name in added_buffers:  # a helper's tensor that a later rewrite of this apply left unread
                if name not in still_used:
                    transaction.delete_buffer(name)

    def undo(self, rewritten: _Rewritten) -> None:
        """Undo what :meth:`rewrite` and :meth:`commit` did, from wherever they stopped."""
        rewritten.transaction.rollback(self.gm.graph)

    def report_of(self, rewritten: _Rewritten) -> Report:
        return self.report.build(rewritten.nodes_before, len(self.gm.graph.nodes),
                                 time.perf_counter() - rewritten.started)

    def _passes(self, graph: torch.fx.Graph, candidates: list[torch.fx.Node], transaction: Transaction) -> bool:
        """Run passes to a fixpoint, starting from ``candidates``; True when any rule fired."""
        started = time.perf_counter()
        rewriter = Rewriter(self.gm, graph, self.helpers, transaction, self.context)
        settled: set[torch.fx.Node] = set()
        domain: set[torch.fx.Node] | None = None
        try:
            # max_passes passes may rewrite; one more finds whether rules still fire after them
            for number in range(1, self.max_passes + 2):
                self.report.passes = number
                matcher = Matcher(self.gm, explain=self.explain, retired=transaction.retired)
                current = self._visit(_Pass(matcher, rewriter, set(candidates), domain), candidates, settled)
                if self.on_rewrite is not None:
                    return bool(current.fired)
                if not current.fired:
                    return number > 1
                candidates, domain = self._worklist(current.touched, transaction.retired)
                settled = self._settled(candidates, current)
                if self.explain:
                    self._explain_passed_over(Matcher(self.gm, explain=True, retired=transaction.retired),
                                              candidates, domain)
        finally:  # timed per apply, not per attempt: the clock would cost as much as a rejection
            self.report.match_seconds = time.perf_counter() - started - self.report.rewrite_seconds
        raise FxrConvergenceError(
            f"rules still firing after max_passes={self.max_passes} passes: {', '.join(sorted(current.fired))}; "
            "they may undo each other or grow the graph"
        )

    def _visit(self, current: _Pass, candidates: list[torch.fx.Node], settled: set[torch.fx.Node]) -> _Pass:
        """One pass over ``candidates`` and the nodes its rewrites wake; ``settled`` ones are passed over until
        the pass first fires."""
        claimed, retired, attempts, visited = current.claimed, current.matcher.retired, self.report.attempts, \
            current.visited
        # with explain=True the matcher's tracer hears what the cheap test would reject: it is not asked first
        rules_at, anchor_test = self.index.rules_at, ({} if self.explain else self.anchor_tests).get
        woken = current.woken
        position = -1
        for node in _merged(candidates, woken):
            position += 1
            if node in claimed or node in retired:
                continue
            visited[node] = position
            if node in settled and not current.fired:
                continue
            current.position, current.node = position, node
            for rule in rules_at(node):
                attempts[rule.name] += 1
                may_match = anchor_test(id(rule))
                if may_match is not None and not may_match(node):
                    continue  # most attempts: rejected before any binding, nothing to report
                if self._try(rule, node, current):
                    current.fired.add(rule.name)
                    break
        return current

    def _try(self, rule: Rule, node: torch.fx.Node, current: _Pass) -> bool:
        try:
            match = self._match(rule, node, current.matcher)
            if match is not None and current.claimed.intersection(match.nodes):
                current.overlapped.add(node)
                raise Skip(SkipReason.OVERLAP, "part of this match was created by another rewrite in this pass")
            if match is not None and self.accept is not None and not self.accept(match):
                raise Skip(SkipReason.FILTERED, "the caller's filter refused this match")
        except Skip as skip:
            self._skipped(rule, node, skip, current.matcher)
            return False
        if match is None:
            best = current.matcher.misses.best
            if self.explain and best is not None and best.progress > 0:
                self.report.missed(best)
            return False
        return self._rewrite(rule, node, match, current)

    def _match(self, rule: Rule, node: torch.fx.Node, matcher: Matcher) -> Match | None:
        """The rule's compiled matcher (``_visit`` asked its ``may_match_anchor`` already)."""
        return self.compiled[id(rule)].match_candidate(node, matcher)

    def _explain_passed_over(self, matcher: Matcher, candidates: list[torch.fx.Node],
                             domain: set[torch.fx.Node] | None) -> None:
        """With ``explain=True``: the near misses at the nodes rules may anchor at (in ``domain``) that the pass
        leaves out because no rule can match there, found by the same matchers with the tracer attached."""
        listed = set(candidates)
        anchors = self.index.anchors(NodeIndex(self.gm.graph), among=domain)
        for node in in_graph_order(self.gm.graph, anchors - listed):
            for rule in self.index.rules_at(node):
                try:
                    self.compiled[id(rule)].match_candidate(node, matcher)
                except Skip:
                    continue
                best = matcher.misses.best
                if best is not None and best.progress > 0:
                    self.report.missed(best)

    def _skipped(self, rule: Rule, node: torch.fx.Node, skip: Skip, matcher: Matcher) -> None:
        self.report.skipped(rule, node.name, skip.reason, lambda: skip.detail)
        progress = matcher.misses.furthest + 1
        # a match that was found but not usable is the nearest of misses; its detail is written only if the
        # report keeps it (the misses of thousands of nodes would cost their details' writing each)
        if self.explain and self.report.keeps_miss(rule.name, node.name, progress, skip.reason):
            self.report.missed(Miss(rule.name, node.name, progress, skip.reason, skip.detail, rule.span))

    def _rewrite(self, rule: Rule, node: torch.fx.Node, match: Match, current: _Pass) -> bool:
        started = time.perf_counter()
        try:
            change = current.rewriter.rewrite(match)
        except Skip as skip:
            self._skipped(rule, node, skip, current.matcher)
            return False
        except FxrError as error:
            raise FxrApplyError(f"{rule.span}: rule {rule.name} failed at node '{node.name}': {error}") from error
        except Exception as error:
            raise FxrApplyError(f"{rule.span}: rule {rule.name} failed at node '{node.name}': "
                                f"{type(error).__name__}: {error}") from error
        finally:
            self.report.rewrite_seconds += time.perf_counter() - started
        self.report.fired(rule, node.name)
        if self.on_rewrite is not None:
            self.on_rewrite(match)
        current.claimed.update(change.created)
        current.touched.update(change.created)
        if change.redirected:
            self._wake(change.redirected, current)
        if current.domain is not None:
            self._wake_beyond_domain(change, current)
        current.touched.update(self._to_look_around(change, current))
        if self.counts_users:  # a capture's new users may make a guard that counts them hold
            current.touched.update(change.gained_users)
        if self.settles:
            position = current.position
            for changed in (node, *change.created, *change.touched, *change.gained_users):
                current.changed[changed] = position
        return True

    def _wake(self, redirected: tuple[tuple[torch.fx.Node, Any], ...], current: _Pass) -> None:
        """Queue the nodes ahead that the pass left out when it started and the rewrite may have made
        candidates.  The test that left a node out reads the targets of the calls down to ``depth - 1`` use
        edges below it, and the literal arguments of those calls: so only the nodes given a new input, and
        their users up to ``depth - 2`` use edges after them (``depth - 1`` when the new input is a literal,
        which the deepest calls' tests read), and only if the new input may satisfy a required argument of
        the rules there (:class:`~fxrules.match.compiled.Satisfiers`)."""
        listed, domain, retired = current.listed, current.domain, current.matcher.retired
        here = current.node._sort_key  # type: ignore[union-attr]
        for user, value in redirected:
            layer: Iterable[torch.fx.Node] = (user,)
            levels = max(self.depth - 1, 1) if isinstance(value, torch.fx.Node) else max(self.depth, 1)
            for level in range(levels):
                for node in layer:
                    if node in listed or node in retired or (domain is not None and node not in domain) \
                            or node._sort_key <= here:
                        continue
                    satisfiers = self._satisfiers_at(node)
                    if satisfiers is not None and satisfiers.admit(value):
                        listed.add(node)
                        heapq.heappush(current.woken, (node._sort_key, id(node), node))
                if level < levels - 1:
                    layer = set().union(*[n.users for n in layer])

    def _wake_beyond_domain(self, change: Rewrite, current: _Pass) -> None:
        """Queue the nodes ahead, outside a later pass's domain, whose match may contain a node ``change``
        touched (given a new input, or left with fewer users; with guards that count users, also one given
        a new user): a pass that visited every node would look at them after this rewrite, in this pass.

        Such a match lies at most ``depth - 1`` use edges after the touched node (``depth`` when guards
        count users: the node may be a capture).  The domain holds the nodes whose outcome the previous
        pass's changes may have changed; a node outside it is left out only until a change reaches it.
        """
        domain, listed, retired = current.domain, current.listed, current.matcher.retired
        assert domain is not None
        here = current.node._sort_key  # type: ignore[union-attr]
        reach = self.depth if self.counts_users else self.depth - 1
        layer: set[torch.fx.Node] = {user for user, _ in change.redirected} | set(change.lost_users)
        if self.counts_users:
            layer |= set(change.gained_users)
        seen: set[torch.fx.Node] = set()
        for level in range(reach + 1):
            for node in layer - seen:
                if node in domain or node in listed or node in retired or node._sort_key <= here:
                    continue
                if self._may_anchor(node):
                    listed.add(node)
                    heapq.heappush(current.woken, (node._sort_key, id(node), node))
            seen |= layer
            if level < reach:
                layer = set().union(*[n.users for n in layer]) - seen

    def _to_look_around(self, change: Rewrite, current: _Pass) -> Iterable[torch.fx.Node]:
        """The existing nodes ``change`` touched whose surroundings the next pass must look at again.

        Not the nodes it gave a new input within the pass's domain: they come after the rewritten node, so
        this pass visits them later (with their new inputs) if it may match there (:meth:`_wake`), and a
        change after that visit is another rewrite's, which the next pass looks around.  The nodes that lost
        a user are ahead of the pass or behind it, and so are the outputs of a multi-output pattern.
        """
        if self.multi_output:
            return change.touched
        domain = current.domain
        beyond = [] if domain is None else [user for user, _ in change.redirected if user not in domain]
        return [*change.lost_users, *beyond]

    def _satisfiers_at(self, node: torch.fx.Node) -> Satisfiers | None:
        """What may satisfy a required argument of the rules filed under the node's key (None: no rule is),
        once per key."""
        try:
            return self._satisfiers_by_key[(node.op, node.target)]
        except KeyError:
            pass
        except TypeError:  # an unhashable target: not kept
            return self._satisfiers_of(self.index.rules_at(node))
        found = self._satisfiers_by_key[(node.op, node.target)] = self._satisfiers_of(self.index.rules_at(node))
        return found

    def _satisfiers_of(self, rules: tuple[Rule, ...]) -> Satisfiers | None:
        if not rules:
            return None
        return functools.reduce(operator.or_, (self.compiled[id(rule)].satisfiers for rule in rules), Satisfiers())

    def _worklist(self, touched: set[torch.fx.Node],
                  retired: Mapping[torch.fx.Node, None]) -> tuple[list[torch.fx.Node], set[torch.fx.Node]]:
        """Every node that rules may anchor at and whose match may contain a changed node, in graph order,
        narrowed; and the region it was narrowed from (the next pass's domain).

        A changed node (new, with new inputs, or with fewer users) lies at most ``depth - 1`` use edges
        before the anchor of any match that contains it.  When guards count users, a node whose users
        changed may also be a capture, an argument of a matched node: ``depth`` use edges before.
        """
        seeds = {n for n in touched if n not in retired}
        if self.multi_output:  # further outputs hang off shared inputs: look upstream too
            seeds |= _neighbourhood(seeds, self.depth, operator.attrgetter("all_input_nodes"))
        reach = self.depth if self.counts_users else self.depth - 1
        region = seeds | _neighbourhood(seeds, reach, operator.attrgetter("users"))
        region.difference_update(retired)
        graph = self.gm.graph
        if len(region) <= 4 * len(self.ruleset):  # a few nodes: testing each costs less than narrowing for each rule
            return in_graph_order(graph, {n for n in region if self._may_anchor(n)}), region
        found = Candidates(graph)
        return in_graph_order(graph, self.index.anchors(found, self._narrowing(found, region), region)), region

    def _may_anchor(self, node: torch.fx.Node) -> bool:
        """Some rule filed under the node's key may match there (its compiled matcher does not rule it out)."""
        for rule in self.index.rules_at(node):
            may_match = self.anchor_tests.get(id(rule))
            if may_match is None or may_match(node):
                return True
        return False

    def _settled(self, candidates: list[torch.fx.Node], done: _Pass) -> set[torch.fx.Node]:
        """The candidates of the next pass whose outcome the pass ``done`` already knows: nothing fires there.

        A node looked at after the last rewrite that changed anything within reach of a match anchored
        there (``depth - 1`` use edges), whose matches did not overlap that pass's new nodes, sees the
        same graph around it in the next pass until that pass rewrites something: it would fire nothing
        (else the pass ``done`` would have fired there) and skip for the same reasons, already reported.
        Not when guards count users (any new use changes them) or patterns have several outputs (their
        further outputs are found among users), nor when explaining.
        """
        if not self.settles:
            return set()
        visited, changed, reach = done.visited, done.changed, self.depth - 1
        return {node for node in candidates if node in visited and node not in done.overlapped
                and not _changed_since(node, visited[node], changed, reach)}


def _used_attribute_paths(gm: torch.fx.GraphModule, graph: torch.fx.Graph) -> set[str]:
    """The qualified names the graph still needs: every ``call_module`` and ``get_attr`` target, the modules
    on the path to it (``blk`` of ``blk.r``), and every submodule of a called module (its forward uses them)."""
    used: set[str] = set()
    for node in (*graph.find_nodes(op="call_module"), *graph.find_nodes(op="get_attr")):
        parts = str(node.target).split(".")
        used.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
        if node.op == "call_module":
            try:
                module = gm.get_submodule(str(node.target))
            except AttributeError:
                continue
            used.update(f"{node.target}.{name}" for name, _ in module.named_modules() if name)
    return used


class _LintError(Exception):
    """The rewritten graph fails lint (the original graph may already have failed it)."""

    def __init__(self, graph: torch.fx.Graph, message: str) -> None:
        super().__init__(message)
        self.graph = graph


def _check_lint(graph: torch.fx.Graph) -> None:
    try:
        graph.lint()
    except Exception as error:
        raise FxrUsageError(f"the graph fails lint() as it was given, so fxrules leaves it as it was: {error}") \
            from error


def _commit_failure(graph: torch.fx.Graph, path: str, error: Exception) -> str:
    """What to say when committing a rewritten graph failed; for code Python cannot compile, the rule that
    made the offending line (its node's ``meta["fxrules"]``), when one did."""
    where = f"{path}: " if path else ""
    if isinstance(error, SyntaxError) and error.text:
        assigned = error.text.strip().partition(" = ")[0]
        made_by = next((n.meta["fxrules"] for n in graph.nodes if n.name == assigned and "fxrules" in n.meta), None)
        if made_by is not None:
            where = f"{where}{made_by['file']}:{made_by['line']}: rule {made_by['rule']} made '{error.text.strip()}', "
    return f"{where}the rewritten graph could not be committed, so nothing was changed: {type(error).__name__}: {error}"


def _removable(retired: Mapping[torch.fx.Node, None]) -> Callable[[torch.fx.Node], bool]:
    """Whether the commit may erase an unused node: a retired one (a rewrite replaced it; an impure one
    only where the pattern named its target), or one without side effects.

    ``impure_random`` is the value ``Graph.eliminate_dead_code`` passes by default.  FX deems an in-place
    call such as ``x.add_(1)`` pure, so an unused one would be erased and every later reader of ``x`` see
    another value: a node that changes an argument in place is kept, as an impure one is.
    """
    impure_random = True
    if torch._guards.TracingContext.try_get():
        impure_random = torch._inductor.config.fallback_random

    def removable(node: torch.fx.Node) -> bool:
        return node in retired or not has_side_effects(node, impure_random)

    return removable


def _merged(listed: list[torch.fx.Node], woken: list[tuple[Any, int, torch.fx.Node]]) -> Iterator[torch.fx.Node]:
    """The nodes of ``listed`` (in graph order) and of the heap ``woken`` (which grows meanwhile), in graph order."""
    for node in listed:
        while woken and woken[0][0] < node._sort_key:
            yield heapq.heappop(woken)[2]
        yield node
    while woken:
        yield heapq.heappop(woken)[2]


def _changed_since(node: torch.fx.Node, position: int, changed: Mapping[torch.fx.Node, int], steps: int) -> bool:
    """Whether ``node``, or a node at most ``steps`` use edges before it, changed at ``position`` or later."""
    if changed.get(node, -1) >= position:
        return True
    layer = {node}
    for _ in range(steps):
        layer = {i for n in layer for i in n.all_input_nodes}  # a set: diamonds would repeat nodes
        if any(changed.get(n, -1) >= position for n in layer):
            return True
    return False


def _neighbourhood(seeds: set[torch.fx.Node], depth: int,
                   step: Callable[[torch.fx.Node], Iterable[torch.fx.Node]]) -> set[torch.fx.Node]:
    """The nodes 1 to ``depth`` steps from ``seeds``."""
    found: set[torch.fx.Node] = set()
    frontier = seeds
    for _ in range(depth):
        frontier = set().union(*map(step, frontier)) - found
        found |= frontier
    return found


@overload
def apply(gm: torch.fx.GraphModule, rules: RulesArgument, *, example_inputs: Sequence[Any] | None = None,
          allow: Iterable[str] = (), helpers: Mapping[str, Callable[..., Any]] | None = None,
          max_passes: int = 100, explain: bool = False, static_shapes: bool = False, only: Selection = None,
          exclude: Selection = None, predicates: Predicates | None = None) -> Report: ...


@overload
def apply(gm: ExportedProgram, rules: RulesArgument, *, example_inputs: Sequence[Any] | None = None,
          allow: Iterable[str] = (), helpers: Mapping[str, Callable[..., Any]] | None = None,
          max_passes: int = 100, explain: bool = False, static_shapes: bool = False, only: Selection = None,
          exclude: Selection = None, predicates: Predicates | None = None) -> ExportedProgram: ...


def apply(
    gm: torch.fx.GraphModule | ExportedProgram,
    rules: RulesArgument,
    *,
    example_inputs: Sequence[Any] | None = None,
    allow: Iterable[str] = (),
    helpers: Mapping[str, Callable[..., Any]] | None = None,
    max_passes: int = 100,
    explain: bool = False,
    static_shapes: bool = False,
    only: Selection = None,
    exclude: Selection = None,
    predicates: Predicates | None = None,
) -> Report | ExportedProgram:
    """Rewrite ``gm`` in place with ``rules`` until no rule fires, and report what happened.

    ``rules`` is a path, a bundled ruleset name (``"algebra.fxr"``), a
    ``RuleSet``, or a list of them.  With ``example_inputs`` (a list or tuple,
    one value per graph input), shape metadata is propagated first so typed
    captures and guards can use it; its sizes are symbols, not the examples'
    (:mod:`fxrules.engine.shape_propagation`).  A rule that would specialize the graph
    to a size the graph leaves symbolic is skipped (``dynamic size``) unless
    ``static_shapes=True``.  If anything fails, ``gm`` is left exactly as it
    was and an ``FxrError`` is raised.

    ``only``/``exclude`` choose rules by name or glob pattern
    (:meth:`RuleSet.select`); ``predicates`` maps the names of user
    predicates that guards call to functions of the values they pass.

    Given a ``torch.export`` ``ExportedProgram``, it returns a new program
    (the input is not changed); :func:`apply_program` returns its report too.
    """
    if isinstance(gm, ExportedProgram):
        if example_inputs is not None:
            raise FxrUsageError("an ExportedProgram carries its own shape metadata: give apply no example_inputs")
        return apply_program(gm, rules, allow=allow, helpers=helpers, max_passes=max_passes, explain=explain,
                             static_shapes=static_shapes, only=only, exclude=exclude, predicates=predicates).program
    module = _check_module(gm)
    if example_inputs is not None:
        example_inputs = check_example_inputs(module, example_inputs)
    ruleset = load_rules(rules, allow).select(only, exclude)
    helper_table = checked_options(ruleset, helpers, max_passes, predicates)
    restore_metadata = None
    if example_inputs is not None:
        restore_metadata = propagate_shapes(module, example_inputs, static_shapes)
    try:
        runs = [(path, _Run(sub, ruleset, helper_table, max_passes, explain, context, static_shapes))
                for path, sub, context in higher_order_subgraphs(module)]
        runs.append(("", _Run(module, ruleset, helper_table, max_passes, explain, static_shapes=static_shapes)))
        with using_predicates(predicate_table(predicates)):
            return _rewrite_all(runs)
    except BaseException:
        if restore_metadata is not None:  # all or nothing: the shapes propagated for this apply go too
            restore_metadata()
        raise


def _rewrite_all(runs: list[tuple[str, _Run]]) -> Report:
    """Rewrite each graph (subgraphs innermost first, the module last) to its fixpoint, then commit them all,
    and report: all or nothing together.

    Each graph's undo log exists before its first change, and every step of the rewrite and of the commit
    is logged, so a failure anywhere (a ``KeyboardInterrupt`` too) undoes every graph from wherever it
    stopped, committed or not, and each is as it was, its own nodes included.  The report is built before
    the last step that could fail is left behind: once this returns, nothing of the ``apply`` remains to run.
    """
    started = time.perf_counter()
    done: list[tuple[str, _Run, _Rewritten]] = []
    try:
        for path, run in runs:
            rewritten = run.begin()
            done.append((path, run, rewritten))
            run.rewrite(rewritten)
        for path, run, rewritten in done:
            run.commit(rewritten, path)
        reports = [(path, run.report_of(rewritten)) for path, run, rewritten in done]
        return reports[0][1] if len(reports) == 1 else combine(reports[-1][1], reports[:-1],
                                                               time.perf_counter() - started)
    except BaseException as failure:
        for _, run, rewritten in reversed(done):
            run.undo(rewritten)
        if isinstance(failure, _LintError):
            _check_lint(failure.graph)  # the graph was broken before fxrules touched it: say so
            raise FxrApplyError(f"the rewritten graph is invalid, so nothing was changed: {failure}") from failure
        raise


def one_pass(gm: torch.fx.GraphModule, ruleset: RuleSet, on_rewrite: Callable[[Match], None],
             accept: Callable[[Match], bool] | None = None) -> Report:
    """One pass of ``ruleset`` over ``gm`` (not its subgraphs), all or nothing, as torch.fx's
    ``replace_pattern`` rewrites: every match in graph order, none looked for in what the rewrites created.
    ``accept`` may refuse a match (it is skipped, reason 'filtered'); ``on_rewrite`` sees each match rewritten."""
    module = _check_module(gm)
    run = _Run(module, ruleset, checked_options(ruleset, None, 1), 1, explain=False, on_rewrite=on_rewrite,
               accept=accept)
    return _rewrite_all([("", run)])


def apply_program(program: ExportedProgram, rules: RulesArgument, *, allow: Iterable[str] = (),
                  helpers: Mapping[str, Callable[..., Any]] | None = None, max_passes: int = 100,
                  explain: bool = False, static_shapes: bool = False, only: Selection = None,
                  exclude: Selection = None, predicates: Predicates | None = None) -> RewrittenProgram:
    """Rewrite a ``torch.export`` program: a new, valid ``ExportedProgram`` and the report.

    Parameters, buffers and constants are visible to helpers as in a traced
    module; tensors that helpers make become new buffers of the program.
    """
    if not isinstance(program, ExportedProgram):
        raise FxrUsageError(f"apply_program needs a torch.export.ExportedProgram, got {type(program).__name__}")
    ruleset = load_rules(rules, allow).select(only, exclude)
    return rewrite_program(program, lambda gm: apply(gm, ruleset, helpers=helpers, max_passes=max_passes,
                                                     explain=explain, static_shapes=static_shapes,
                                                     predicates=predicates))
