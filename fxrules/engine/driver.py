"""``apply``: the driver that runs a rule set over a graph module in passes, all or nothing.

* Check the inputs, load the rules, check that every helper a rule calls exists.
* Passes (:class:`_Run`): each visits the nodes its scheduler gives (:mod:`fxrules.engine.scheduler`),
  in graph order; at a node the rules filed under its key are tried in file order, by their compiled
  matchers (:mod:`fxrules.match.compiled`), and the first usable match (the safety checks,
  :mod:`fxrules.match.safety`) is rewritten at once.  Nodes a rewrite creates are not matched again in
  the same pass.  Passes repeat until one fires nothing; after ``max_passes`` the run stops with
  ``FxrConvergenceError`` (:class:`~fxrules.engine.report.StopReason`).
* ``explain=True`` attaches a tracer to the same matchers and visits the same nodes; the near misses
  at the anchor nodes a pass leaves out (:meth:`~fxrules.engine.scheduler.Scheduler.passed_over`) are
  traced apart.
* Every change is logged in a :class:`~fxrules.rewrite.transaction.Transaction`; no copy of the graph.
* The commit, at the fixpoint: lint, erase the retired nodes and other dead code, recompile, delete what
  the rewrite left unreferenced; each step in the same undo log.  A graph on which nothing fired is left
  exactly as it was (not even linted).
* All or nothing: any failure, anywhere (a ``KeyboardInterrupt`` too), undoes the log from where it
  stopped, for the module and every subgraph of its higher-order operators (rewritten innermost first).
* Cost: one index lookup per visited node plus the matching of the rules filed under its key,
  ``O(candidates x pattern size)``.

Example::

    report = apply(gm, "algebra.fxr")          # rewrites gm in place
    report.counts()                             # {"double_neg": 2}
    report.stop_reason                          # StopReason.FIXPOINT
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, overload

import attrs
import torch
import torch.fx
from torch.export import ExportedProgram

from fxrules.diagnostics import FxrApplyError, FxrConvergenceError, FxrError, FxrUsageError
from fxrules.engine.anchors import never_starts
from fxrules.engine.exported import RewrittenProgram, rewrite_program
from fxrules.engine.loading import load
from fxrules.engine.report import Report, ReportBuilder, StopReason, combine
from fxrules.engine.scheduler import Incremental, Plan, Scheduler, SchedulerFactory, reach_of
from fxrules.engine.shape_propagation import check_example_inputs, propagate_shapes
from fxrules.graph.metadata import has_side_effects
from fxrules.graph.module_effects import attributes_fixed
from fxrules.graph.sizes import fixed
from fxrules.graph.subgraphs import TOP_LEVEL, CallContext, higher_order_subgraphs
from fxrules.lang.ir import Rule, RuleSet
from fxrules.match.compiled import CompiledRule, compile_ruleset
from fxrules.match.guards import Predicates, predicate_table, unknown_predicate, using_predicates
from fxrules.match.matcher import Match, Matcher, Miss, RuleIndex
from fxrules.match.safety import InPass
from fxrules.match.skips import Skip, SkipReason
from fxrules.rewrite import helpers as bundled_helpers
from fxrules.rewrite import lint
from fxrules.rewrite.rewriter import Rewriter
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
    """One pass's state, as the loop keeps it: what fired, and the nodes rewrites created (``claimed``: not
    matched again in this pass)."""

    matcher: Matcher
    rewriter: Rewriter
    fired: set[str] = attrs.Factory(set)
    claimed: set[torch.fx.Node] = attrs.Factory(set)
    checks: InPass = attrs.field(init=False)  # the pass stage of the safety checks, against ``claimed``

    def __attrs_post_init__(self) -> None:
        self.checks = InPass(self.claimed)


class _Attempt(NamedTuple):
    """What trying one rule at a node filed under its key takes, looked up once per key."""

    rule: Rule
    name: str
    may_match: Callable[[torch.fx.Node], bool] | None  # the compiled matcher's cheap test (None: none, or explain)
    outcome: Callable[[torch.fx.Node, Matcher], Match | Skip | None]  # CompiledRule.outcome


@attrs.define
class _Rewritten:
    """A graph rewritten to its fixpoint but not committed: the undo log, and what the report needs."""

    transaction: Transaction
    fired: bool
    nodes_before: int
    started: float


class _Run:
    """One graph's part of an ``apply``: the passes over the graph itself, then the commit."""

    def __init__(self, gm: torch.fx.GraphModule, ruleset: RuleSet, helpers: Mapping[str, Callable[..., Any]],
                 max_passes: int, explain: bool, context: CallContext = TOP_LEVEL, static_shapes: bool = False,
                 scheduler: SchedulerFactory = Incremental, on_rewrite: Callable[[Match], None] | None = None,
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
        self.scheduler = scheduler
        self.report = ReportBuilder(ruleset)
        if explain:
            self.report.never_starts = never_starts(gm, gm.graph, ruleset)
        self.index = RuleIndex(gm, ruleset)
        self.compiled: Mapping[int, CompiledRule] = compile_ruleset(ruleset).matchers
        self._attempts: dict[tuple[str, Any], tuple[_Attempt, ...]] = {}  # by node key (see _attempts_at)

    def begin(self) -> _Rewritten:
        """The undo log of this run, made before anything changes (the caller keeps it to undo what follows)."""
        return _Rewritten(Transaction(self.gm), False, len(self.gm.graph.nodes), time.perf_counter())

    def rewrite(self, rewritten: _Rewritten) -> None:
        """The passes, every change logged in ``rewritten`` and none committed yet."""
        plan = Plan(self.gm, self.index, self.compiled, rewritten.transaction.retired, reach_of(self.ruleset))
        scheduler = self.scheduler(plan)
        started = scheduler.start()
        if self.explain:
            self._explain_passed_over(Matcher(self.gm, explain=True), scheduler)
        if not started:  # no node any rule can anchor at: one pass that finds nothing, nothing to undo
            self.report.passes = 1
            self.report.match_seconds = time.perf_counter() - rewritten.started
            return
        with fixed(self.gm, self.static_shapes), attributes_fixed():
            rewritten.fired = self._passes(plan, scheduler, rewritten.transaction)

    def commit(self, rewritten: _Rewritten, path: str) -> None:
        """Commit what :meth:`rewrite` did (nothing, if nothing fired), every step logged for :meth:`undo`:
        lint, erase the retired nodes and other dead code, recompile, delete what is no longer used."""
        if not rewritten.fired:
            return
        graph, transaction = self.gm.graph, rewritten.transaction
        try:
            lint.lint(graph)
        except Exception as error:
            raise _LintError(graph, f"{path}: {error}" if path else str(error)) from error
        try:
            self._erase_and_recompile(transaction)
        except Exception as error:  # code generation, recompiling, deleting: nothing a rule could check
            raise FxrApplyError(_commit_failure(graph, path, error)) from error

    def _erase_and_recompile(self, transaction: Transaction) -> None:
        gm, graph = self.gm, self.gm.graph
        referenced_before = _module_targets(graph)
        transaction.erase_dead(graph, _removable())
        transaction.recompile(gm)
        referenced_after = _module_targets(graph)
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

    def _passes(self, plan: Plan, scheduler: Scheduler, transaction: Transaction) -> bool:
        """Run passes to a fixpoint, visiting what ``scheduler`` says; True when any rule fired."""
        started = time.perf_counter()
        rewriter = Rewriter(self.gm, self.gm.graph, self.helpers, transaction, self.context)
        try:
            # max_passes passes may rewrite; one more finds whether rules still fire after them
            for number in range(1, self.max_passes + 2):
                self.report.passes = number
                matcher = Matcher(self.gm, explain=self.explain, retired=transaction.retired)
                current = self._visit(_Pass(matcher, rewriter), plan, scheduler)
                if self.on_rewrite is not None:
                    return bool(current.fired)
                if not current.fired:
                    return number > 1
                scheduler.next_pass()
                if self.explain:
                    self._explain_passed_over(Matcher(self.gm, explain=True, retired=transaction.retired),
                                              scheduler)
        finally:  # timed per apply, not per attempt: the clock would cost as much as a rejection
            self.report.match_seconds = time.perf_counter() - started - self.report.rewrite_seconds
        self.report.stop_reason = StopReason.PASS_LIMIT
        raise FxrConvergenceError(
            f"rules still firing after max_passes={self.max_passes} passes: {', '.join(sorted(current.fired))}; "
            "they may undo each other or grow the graph"
        )

    def _visit(self, current: _Pass, plan: Plan, scheduler: Scheduler) -> _Pass:
        """One pass over the nodes ``scheduler`` gives: at each, the rules filed under its key in file order,
        until one fires."""
        claimed, retired, fired = current.claimed, current.matcher.retired, current.fired
        attempts, by_key = self.report.attempts, self._attempts
        for node in scheduler.visits():
            if node in claimed or node in retired:
                continue
            at_node = by_key.get((node.op, node.target))  # looked up here, not by a call: once per node visited
            for attempt in at_node if at_node is not None else self._attempts_at(node, plan):
                attempts[attempt.name] += 1
                may_match = attempt.may_match
                if may_match is not None and not may_match(node):
                    continue  # most attempts: rejected before any binding, nothing to report
                if self._try(attempt, node, current, scheduler):
                    fired.add(attempt.name)
                    break
        return current

    def _attempts_at(self, node: torch.fx.Node, plan: Plan) -> tuple[_Attempt, ...]:
        """What trying each rule filed under the node's key takes (:class:`_Attempt`), in file order; made once
        per key, so the loop looks up neither the rule's name, nor its matcher, nor its cheap test."""
        # with explain=True the matcher's tracer hears what the cheap test would reject: it is not asked first
        tests = {} if self.explain else plan.anchor_tests
        found = self._attempts[(node.op, node.target)] = tuple(
            _Attempt(rule, rule.name, tests.get(id(rule)), self.compiled[id(rule)].outcome)
            for rule in self.index.rules_at(node))
        return found

    def _try(self, attempt: _Attempt, node: torch.fx.Node, current: _Pass, scheduler: Scheduler) -> bool:
        """The rule of ``attempt`` at ``node`` (whose cheap test holds): rewrite its first usable match."""
        rule, matcher = attempt.rule, current.matcher
        try:
            match = attempt.outcome(node, matcher)
        except Skip as skip:  # the anchor's step budget exhausted
            self._skipped(rule, node, skip, matcher)
            return False
        if isinstance(match, Skip):
            self._skipped(rule, node, match, matcher)
            return False
        if match is None:
            best = matcher.misses.best
            if self.explain and best is not None and best.progress > 0:
                self.report.missed(best)
            return False
        try:
            current.checks.check(match)  # the pass stage of the safety checks
            if self.accept is not None and not self.accept(match):
                raise Skip(SkipReason.FILTERED, "the caller's filter refused this match")
        except Skip as skip:
            if skip.reason is SkipReason.OVERLAP:  # the next pass may fire there: the scheduler's business
                scheduler.overlapped(node)
            self._skipped(rule, node, skip, matcher)
            return False
        return self._rewrite(rule, node, match, current, scheduler)

    def _explain_passed_over(self, matcher: Matcher, scheduler: Scheduler) -> None:
        """With ``explain=True``: the near misses at the anchor nodes the pass leaves out because no rule can
        match there (:meth:`Scheduler.passed_over`), found by the same matchers with the tracer attached."""
        for node in scheduler.passed_over():
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
        if not self.explain:
            return
        progress = matcher.misses.furthest + 1
        # a match that was found but not usable is the nearest of misses; its detail is written only if the
        # report keeps it (the misses of thousands of nodes would cost their details' writing each)
        if self.report.keeps_miss(rule.name, node.name, progress, skip.reason):
            self.report.missed(Miss(rule.name, node.name, progress, skip.reason, skip.detail, rule.span))

    def _rewrite(self, rule: Rule, node: torch.fx.Node, match: Match, current: _Pass,
                 scheduler: Scheduler) -> bool:
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
        if change.created:  # most rewrites create nothing (``x * 1 => x``)
            current.claimed.update(change.created)
        scheduler.rewritten(node, change)
        return True


def _module_targets(graph: torch.fx.Graph) -> set[str]:
    """The qualified names the graph's ``call_module`` nodes call (a set: not sorted into graph order first)."""
    return {str(n.target) for n in graph.find_nodes(op="call_module", sort=False)}


def _used_attribute_paths(gm: torch.fx.GraphModule, graph: torch.fx.Graph) -> set[str]:
    """The qualified names the graph still needs: every ``call_module`` and ``get_attr`` target, the modules
    on the path to it (``blk`` of ``blk.r``), and every submodule of a called module (its forward uses them)."""
    used: set[str] = set()  # a set: the nodes need not be sorted into graph order (find_nodes' default)
    for node in (*graph.find_nodes(op="call_module", sort=False), *graph.find_nodes(op="get_attr", sort=False)):
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


def _removable() -> Callable[[torch.fx.Node], bool]:
    """Whether the commit may erase an unused node a rewrite did not retire: one without side effects (a
    retired node, which a rewrite replaced, is erased whatever it does: an impure one is retired only where
    the pattern named its target).

    ``impure_random`` is the value ``Graph.eliminate_dead_code`` passes by default.  FX deems an in-place
    call such as ``x.add_(1)`` pure, so an unused one would be erased and every later reader of ``x`` see
    another value: a node that changes an argument in place is kept, as an impure one is.
    """
    impure_random = True
    if torch._guards.TracingContext.try_get():
        impure_random = torch._inductor.config.fallback_random

    def removable(node: torch.fx.Node) -> bool:
        return not has_side_effects(node, impure_random)

    return removable


@overload
def apply(gm: torch.fx.GraphModule, rules: RulesArgument, *, example_inputs: Sequence[Any] | None = None,
          allow: Iterable[str] = (), helpers: Mapping[str, Callable[..., Any]] | None = None,
          max_passes: int = 100, explain: bool = False, static_shapes: bool = False, only: Selection = None,
          exclude: Selection = None, predicates: Predicates | None = None,
          scheduler: SchedulerFactory = Incremental) -> Report: ...


@overload
def apply(gm: ExportedProgram, rules: RulesArgument, *, example_inputs: Sequence[Any] | None = None,
          allow: Iterable[str] = (), helpers: Mapping[str, Callable[..., Any]] | None = None,
          max_passes: int = 100, explain: bool = False, static_shapes: bool = False, only: Selection = None,
          exclude: Selection = None, predicates: Predicates | None = None,
          scheduler: SchedulerFactory = Incremental) -> ExportedProgram: ...


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
    scheduler: SchedulerFactory = Incremental,
) -> Report | ExportedProgram:
    """Rewrite ``gm`` in place with ``rules`` until no rule fires, and report what happened.

    ``rules`` is a path, a bundled ruleset name (``"algebra.fxr"``), a
    ``RuleSet``, or a list of them.  With ``example_inputs`` (a list or tuple,
    one value per graph input), shape metadata is propagated first so typed
    captures and guards can use it; its sizes are symbols, not the examples'
    (:mod:`fxrules.engine.shape_propagation`).  A rule that would specialize the graph
    to a size the graph leaves symbolic is skipped (``dynamic size``) unless
    ``static_shapes=True``.  If anything fails, ``gm`` is left exactly as it
    was and an ``FxrError`` is raised.  ``scheduler`` decides which nodes each
    pass visits (:mod:`fxrules.engine.scheduler`); every scheduler finds the
    same rewrites, the default finds them fastest.

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
                             static_shapes=static_shapes, only=only, exclude=exclude, predicates=predicates,
                             scheduler=scheduler).program
    module = _check_module(gm)
    if not callable(scheduler):
        raise FxrUsageError(f"scheduler must be a Scheduler class of fxrules.engine.scheduler (Incremental, "
                            f"VisitEverything) or a callable making one from a Plan; got {scheduler!r}")
    if example_inputs is not None:
        example_inputs = check_example_inputs(module, example_inputs)
    ruleset = load_rules(rules, allow).select(only, exclude)
    helper_table = checked_options(ruleset, helpers, max_passes, predicates)
    restore_metadata = None
    if example_inputs is not None:
        restore_metadata = propagate_shapes(module, example_inputs, static_shapes)
    try:
        runs = [(path, _Run(sub, ruleset, helper_table, max_passes, explain, context, static_shapes, scheduler))
                for path, sub, context in higher_order_subgraphs(module)]
        runs.append(("", _Run(module, ruleset, helper_table, max_passes, explain, TOP_LEVEL, static_shapes,
                              scheduler)))
        return _rewrite_all(runs, predicate_table(predicates))
    except BaseException:
        if restore_metadata is not None:  # all or nothing: the shapes propagated for this apply go too
            restore_metadata()
        raise


def _rewrite_all(runs: list[tuple[str, _Run]], predicates: Predicates | None = None) -> Report:
    """Rewrite each graph (subgraphs innermost first, the module last) to its fixpoint, then commit them all,
    and report: all or nothing together.  Guards call the user predicates of ``predicates`` (None: those of
    the caller's context) while the passes run, which is also undone if its end is interrupted.

    Each graph's undo log exists before its first change, and every step of the rewrite and of the commit
    is logged, so a failure anywhere (a ``KeyboardInterrupt`` too) undoes every graph from wherever it
    stopped, committed or not, and each is as it was, its own nodes included.  The report is built before
    the last step that could fail is left behind: once this returns, nothing of the ``apply`` remains to run.
    """
    started = time.perf_counter()
    done: list[tuple[str, _Run, _Rewritten]] = []
    try:
        with contextlib.nullcontext() if predicates is None else using_predicates(predicates):
            for path, run in runs:
                rewritten = run.begin()
                done.append((path, run, rewritten))
                run.rewrite(rewritten)
        for path, run, rewritten in done:
            run.commit(rewritten, path)
        reports = [(path, run.report_of(rewritten)) for path, run, rewritten in done]
        return reports[0][1] if len(reports) == 1 else combine([reports[-1], *reports[:-1]],
                                                               time.perf_counter() - started)
    except BaseException as failure:
        for _, run, rewritten in reversed(done):
            run.undo(rewritten)
        if isinstance(failure, FxrConvergenceError):  # what the passes of the graph that kept firing did
            path, run, rewritten = done[-1]
            failure.report = combine([(path, run.report_of(rewritten))], time.perf_counter() - started)
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
                  exclude: Selection = None, predicates: Predicates | None = None,
                  scheduler: SchedulerFactory = Incremental) -> RewrittenProgram:
    """Rewrite a ``torch.export`` program: a new, valid ``ExportedProgram`` and the report.

    Parameters, buffers and constants are visible to helpers as in a traced
    module; tensors that helpers make become new buffers of the program.
    """
    if not isinstance(program, ExportedProgram):
        raise FxrUsageError(f"apply_program needs a torch.export.ExportedProgram, got {type(program).__name__}")
    ruleset = load_rules(rules, allow).select(only, exclude)
    return rewrite_program(program, lambda gm: apply(gm, ruleset, helpers=helpers, max_passes=max_passes,
                                                     explain=explain, static_shapes=static_shapes,
                                                     predicates=predicates, scheduler=scheduler))
