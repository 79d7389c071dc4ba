"""Which nodes each pass of ``apply`` visits: the scheduler seam of the pass loop.

* The pass loop (:mod:`fxrules.engine.driver`) asks a :class:`Scheduler` for the nodes a pass visits
  (:meth:`~Scheduler.visits`, in graph order), tells it each rewrite (:meth:`~Scheduler.rewritten`) and
  each match that overlapped the pass's own new nodes (:meth:`~Scheduler.overlapped`), and, after a
  pass that fired, asks it to prepare the next (:meth:`~Scheduler.next_pass`).  What to do at a node
  (rules in file order, first match rewritten) is the loop's, not the scheduler's.
* :class:`Incremental` (the default) visits only the nodes where a match may have appeared;
  :class:`VisitEverything` visits, in every pass, every node a rule may anchor at.  Both find the same
  rewrites in the same order: :class:`VisitEverything` is the obvious semantics, and the reference the
  tests compare :class:`Incremental` with.
* A scheduler is made per graph (an ``apply`` also rewrites the subgraphs of higher-order operators),
  from that graph's :class:`Plan`: ``apply`` takes the class, or any callable from a plan to a scheduler.

Example::

    report = fxrules.apply(gm, "algebra.fxr", scheduler=VisitEverything)   # slow, obviously complete

Glossary of the node sets (``depth``: the most operations on a path from a pattern output down to a
capture, :class:`Reach`):

* **anchor node**: a node some rule is filed under by its key (op, target): the rule's first pattern
  output may stand there.
* **candidates**: the anchor nodes a pass means to visit, in graph order, found as it starts.
* **narrowed**: candidates less the nodes where a compiled rule cannot match, judged from the calls and
  literals its pattern requires of the node's operands
  (:attr:`~fxrules.match.compiled.CompiledRule.candidates`).
* **woken**: nodes ahead of the pass that a rewrite of the pass may have made candidates (given a new
  input, or users of such a node within ``depth``); visited later in the same pass.
* **listed**: the candidates and the woken nodes: each is visited at most once per pass.
* **touched**: nodes a pass created or changed (new inputs, fewer users) around which the next pass looks.
* **region**, or the next pass's **domain**: the touched nodes and the nodes within ``depth`` use edges
  after them; the next pass's candidates are narrowed from it.  A node outside it is woken only when a
  rewrite of that pass reaches it (:meth:`Incremental._wake_beyond_domain`).
* **visited** / **changed**: where (the count of nodes the pass had listed so far) the pass looked at a
  node / last rewrote something that changed a node's inputs or users (but for the nodes it gave a new
  input: they come after every node visited so far, :meth:`Incremental._note_changed`).
* **settled**: candidates of the next pass whose outcome the pass just done knows already (looked at
  after every change within their reach, and no overlap there): nothing fires there, so the next pass
  passes over them until it first fires.
* **overlapped**: nodes where a match contained a node the same pass created (skipped ``overlap``): the
  next pass may fire there, so they never settle.
* **claimed** (the loop's): the nodes a pass created, not matched again in that pass; **retired**: nodes
  rewritten away, erased at the commit.
"""

from __future__ import annotations

import abc
import functools
import heapq
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import attrs
import torch.fx

from fxrules.lang.ir import AltTemplate, GuardCall, GuardExpr, OpTemplate, Rule, RuleSet, SeqTemplate, Template
from fxrules.match.compiled import CompiledRule
from fxrules.match.index import NodeIndex, Nodes, RuleIndex, in_graph_order
from fxrules.match.narrowing import Candidates, Satisfiers
from fxrules.memo import per_object
from fxrules.rewrite.rewriter import Rewrite

Node = torch.fx.Node
_UNSEEN: Any = object()  # a key _wakers_at has not been asked about yet

#: Guard functions whose value depends on a value's users, which rewrites elsewhere can change.
USER_COUNTING = frozenset({"num_users", "is_mutated"})


@attrs.frozen
class Reach:
    """How far a rewrite can change the outcome of matching elsewhere, from the rule set alone."""

    depth: int  # the deepest pattern output: a match's nodes lie within depth - 1 use edges before its anchor
    multi_output: bool  # further outputs hang off shared inputs: a change reaches upstream too
    counts_users: bool  # a guard reads how a value is used (num_users, is_mutated): new users matter


@per_object
def reach_of(ruleset: RuleSet) -> Reach:
    """The :class:`Reach` of a rule set, computed once per RuleSet object."""
    return Reach(
        depth=max((pattern_depth(o) for rule in ruleset for o in rule.pattern), default=1),
        multi_output=any(len(rule.pattern) > 1 for rule in ruleset),
        counts_users=any(rule.guard is not None and any(_calls(c) & USER_COUNTING for c in rule.guard.conditions)
                         for rule in ruleset),
    )


def pattern_depth(template: Template, known: dict[int, int] | None = None) -> int:
    """The longest chain of operations from a pattern output down to its captures.

    ``known`` holds the depths found so far by template: a name used in both options of ``A | B`` is one
    template reached twice, and a stack of such alternatives would otherwise be walked 2 ** k times.
    """
    known = {} if known is None else known
    depth = known.get(id(template))
    if depth is not None:
        return depth
    if isinstance(template, OpTemplate):
        depth = 1 + max((pattern_depth(t, known) for t in template.operands()), default=0)
    elif isinstance(template, AltTemplate | SeqTemplate):
        parts = template.options if isinstance(template, AltTemplate) else template.items
        depth = max((pattern_depth(t, known) for t in parts), default=0)
    else:
        depth = 0
    known[id(template)] = depth
    return depth


def _calls(expr: GuardExpr) -> set[str]:
    """The guard functions a guard expression calls."""
    found = {expr.func} if isinstance(expr, GuardCall) and expr.receiver is None else set()
    for field in attrs.fields(type(expr)):
        value = getattr(expr, field.name)
        for part in value if isinstance(value, tuple) else (value,):
            if isinstance(part, GuardExpr):
                found |= _calls(part)
    return found


@attrs.frozen
class Plan:
    """What a scheduler of one graph's passes may use: made by the driver for each graph it rewrites."""

    gm: torch.fx.GraphModule
    index: RuleIndex  # the rules filed under each node's key
    compiled: Mapping[int, CompiledRule]  # id(rule) -> its compiled matcher
    retired: Mapping[Node, None]  # nodes rewritten away in this apply (no longer users of anything)
    reach: Reach

    @functools.cached_property
    def anchor_tests(self) -> dict[int, Callable[[Node], bool]]:
        """id(rule) -> its compiled matcher's cheap test at a node the index filed under the rule (absent: none)."""
        return {key: m.may_match_anchor for key, m in self.compiled.items()
                if m.may_match_anchor is not None}

    def may_anchor(self, node: Node) -> bool:
        """Some rule filed under the node's key may match there (its compiled matcher does not rule it out)."""
        tests = self.anchor_tests
        for rule in self.index.rules_at(node):
            may_match = tests.get(id(rule))
            if may_match is None or may_match(node):
                return True
        return False


class Scheduler(abc.ABC):
    """Asked by the pass loop of one graph which nodes each pass visits, and told what changed there."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    @abc.abstractmethod
    def start(self) -> bool:
        """Find the nodes pass 1 visits; False when there are none (no rule may match anywhere)."""

    @abc.abstractmethod
    def visits(self) -> Iterator[Node]:
        """The nodes the current pass visits, in graph order; it may grow while the pass rewrites."""

    def rewritten(self, anchor: Node, change: Rewrite) -> None:  # noqa: B027 - a scheduler may not care
        """A rule fired at ``anchor`` (the node :meth:`visits` gave last), changing what ``change`` says."""

    def overlapped(self, anchor: Node) -> None:  # noqa: B027 - a scheduler may not care
        """A match at ``anchor`` contained a node the current pass created, and was skipped."""

    @abc.abstractmethod
    def next_pass(self) -> None:
        """The current pass fired: find the nodes the next one visits."""

    def passed_over(self) -> list[Node]:
        """The anchor nodes the current pass leaves out as it starts (no rule can match there), in graph
        order: ``explain=True`` traces their near misses apart."""
        return []


#: What ``apply(..., scheduler=...)`` takes: a scheduler class, or any callable from a plan to a scheduler.
SchedulerFactory = Callable[[Plan], Scheduler]


class VisitEverything(Scheduler):
    """Every pass visits every anchor node the graph has as the pass starts, in graph order: no narrowing,
    no waking, nothing settled.  Slow and obviously complete."""

    def start(self) -> bool:
        self._nodes = self._anchor_nodes()
        return bool(self._nodes)

    def visits(self) -> Iterator[Node]:
        return iter(self._nodes)

    def next_pass(self) -> None:
        self._nodes = self._anchor_nodes()

    def _anchor_nodes(self) -> list[Node]:
        return self.plan.index.candidates(NodeIndex(self.plan.gm.graph))


class _Wakers(NamedTuple):
    """What may wake a node of one key: the :class:`Satisfiers` of the rules filed under it, and whether they
    admit a node given as a new input, by the node's (op, target) met so far.

    :meth:`Satisfiers.admit` reads nothing else of a node (its op and target, the target's overload packet), so
    nodes of one (op, target) are admitted alike: the node that each rewrite of a rule creates is a new one, but
    its (op, target) was met at the rule's first rewrite.  The pair is hashable: the graph's own index keys
    call_function nodes by target, and the other ops name their targets by strings (the key of
    :attr:`Incremental._wakers_by_key` is such a pair too).
    """

    satisfiers: Satisfiers
    admitted: dict[tuple[str, Any], bool]


@attrs.define
class _PassState:
    """What :class:`Incremental` keeps about the current pass (see the glossary of the module)."""

    listed: set[Node]
    domain: set[Node] | None  # None: pass 1, whose domain is the whole graph
    woken: list[tuple[Any, int, Node]] = attrs.Factory(list)  # a heap by graph position
    fired: bool = False
    touched: set[Node] = attrs.Factory(set)
    # node -> its position among the listed nodes, in the order the pass reached them; each is listed once, so
    # the node being visited (the last reached) is at len(visited) - 1
    visited: dict[Node, int] = attrs.Factory(dict)
    changed: dict[Node, int] = attrs.Factory(dict)
    overlapped: set[Node] = attrs.Factory(set)


class Incremental(Scheduler):
    """Visit only where a match may have appeared, finding what :class:`VisitEverything` finds.

    * Pass 1 visits the anchor nodes, **narrowed** for compiled rules, all found at once as the pass
      starts, and the nodes its rewrites **wake** (:meth:`_wake`).
    * A later pass visits the narrowed anchor nodes of the **region** around what the previous pass
      **touched**, the nodes its own rewrites wake (inside its domain, as pass 1 does, and beyond it:
      :meth:`_wake_beyond_domain`), and passes over the **settled** ones until it first fires.
    """

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan)
        reach = plan.reach
        # whether a pass may pass over the nodes whose outcome the previous pass knows (see _settled)
        self.settles = not (reach.multi_output or reach.counts_users)
        self._counts_users, self._multi_output = reach.counts_users, reach.multi_output  # read at every rewrite
        # how many levels of use edges _wake walks from a node given a new input: a node, a literal
        self._wake_levels = max(reach.depth - 1, 1), max(reach.depth, 1)
        self._wakers_by_key: dict[tuple[str, Any], _Wakers | None] = {}
        self._candidates: list[Node] = []
        self._settled: set[Node] = set()
        self._pass = _PassState(set(), None)

    def start(self) -> bool:
        graph = self.plan.gm.graph
        found = Candidates(graph)
        anchors = self.plan.index.anchors(found, narrowing(self.plan.compiled, found))
        self._candidates = in_graph_order(graph, anchors)
        self._pass = _PassState(anchors, None)  # the set the candidates were ordered from: listed so far
        return bool(self._candidates)

    def visits(self) -> Iterator[Node]:
        state, settled = self._pass, self._settled
        visited, woken = state.visited, state.woken
        # the candidates (in graph order) and the heap of woken nodes (which grows meanwhile), merged in graph
        # order; each node is listed once, so its position is the count of nodes reached before it
        for node in self._candidates:
            while woken and woken[0][0] < node._sort_key:
                yield self._reached(heapq.heappop(woken)[2])
            visited[node] = len(visited)
            if settled and node in settled and not state.fired:
                continue
            yield node
        while woken:
            yield self._reached(heapq.heappop(woken)[2])

    def _reached(self, node: Node) -> Node:
        """A woken node the pass reached: noted as visited (it is never settled: it was not a candidate)."""
        visited = self._pass.visited
        visited[node] = len(visited)
        return node

    def overlapped(self, anchor: Node) -> None:
        self._pass.overlapped.add(anchor)

    def passed_over(self) -> list[Node]:
        """The anchor nodes of the pass's domain that narrowing left out."""
        graph = self.plan.gm.graph
        anchors = self.plan.index.anchors(NodeIndex(graph), among=self._pass.domain)
        return in_graph_order(graph, anchors - set(self._candidates))

    def rewritten(self, anchor: Node, change: Rewrite) -> None:
        """Wake what the rewrite may have made candidates ahead (:meth:`_wake`), note what the next pass looks
        around (touched), and, when passes settle, where the rewrite changed each node (:meth:`_note_changed`).

        The next pass looks around the nodes the rewrite created and the existing ones it touched, but not
        those it gave a new input within the pass's domain: they come after the rewritten node, so this pass
        visits them later (with their new inputs) if it may match there, and a change after that visit is
        another rewrite's, which the next pass looks around.  The nodes that lost a user are ahead of the pass
        or behind it, and so are the outputs of a multi-output pattern.
        """
        state = self._pass
        state.fired = True
        created, redirected, lost_users, gained_users = change  # one unpacking: no property per field
        domain, touched = state.domain, state.touched
        touched.update(created)
        if redirected:
            self._wake(anchor, redirected)
        if domain is not None:
            self._wake_beyond_domain(anchor, change)
        if self._multi_output:
            touched.update(change.touched)
        else:
            touched.update(lost_users)
            if domain is not None:  # pass 1's domain is every node
                touched.update(user for user, _ in redirected if user not in domain)
        if self._counts_users:  # a capture's new users may make a guard that counts them hold
            touched.update(gained_users)
        if self.settles:
            self._note_changed(anchor, created, lost_users, gained_users)

    def _note_changed(self, anchor: Node, created: tuple[Node, ...], lost_users: tuple[Node, ...],
                      gained_users: tuple[Node, ...]) -> None:
        """Note the nodes a rewrite changed at the position of the node being visited, the last one listed
        (now, while the rewrite has just read them: a log replayed when the pass ends would read them again).

        Not the nodes it gave a new input (most of what it changed): passes settle only with single-output
        patterns, so those nodes used ``anchor``, and they and every node that uses them (where a match that
        contains them may be anchored) come after ``anchor`` in graph order.  A pass visits in graph order
        (candidates in order, woken nodes ahead of the rewritten one) and an existing node never moves, so none
        of them was visited yet: :func:`changed_since` would only compare this change with a later visit, and
        it never decides whether a node settled.
        """
        changed, position = self._pass.changed, len(self._pass.visited) - 1
        changed[anchor] = position
        for node in created:  # a loop per part: cheaper than chaining them, or a dict made of them
            changed[node] = position
        for node in lost_users:
            changed[node] = position
        for node in gained_users:
            changed[node] = position

    def next_pass(self) -> None:
        done = self._pass
        anchors, domain = self._worklist(done.touched)
        self._candidates = in_graph_order(self.plan.gm.graph, anchors)
        self._settled = self._settled_after(done)
        self._pass = _PassState(anchors, domain)  # the set the candidates were ordered from: listed so far

    def _wake(self, anchor: Node, redirected: tuple[tuple[Node, Any], ...]) -> None:
        """Queue the nodes ahead that the pass left out when it started and the rewrite may have made
        candidates.  The test that left a node out reads the targets of the calls down to ``depth - 1`` use
        edges below it, and the literal arguments of those calls: so only the nodes given a new input, and
        their users up to ``depth - 2`` use edges after them (``depth - 1`` when the new input is a literal,
        which the deepest calls' tests read), and only if the new input may satisfy a required argument of
        the rules there (:class:`~fxrules.match.compiled.Satisfiers`)."""
        self._wake_among(anchor, redirected)
        node_levels, literal_levels = self._wake_levels
        if literal_levels == 1:  # depth 1: the nodes given a new input only, whatever the input
            return
        for user, value in redirected:
            levels = node_levels if isinstance(value, Node) else literal_levels
            if levels == 1:
                continue
            layer = {user}
            for _ in range(levels - 1):
                layer = set().union(*[n.users for n in layer])
                self._wake_among(anchor, [(node, value) for node in layer])

    def _wake_among(self, anchor: Node, given: Iterable[tuple[Node, Any]]) -> None:
        """:meth:`_wake` for each node of ``given`` and the new input ``value`` it reaches: queue the node if
        it is not listed, lies ahead of ``anchor``, and ``value`` may satisfy a required argument there."""
        state, retired, by_key = self._pass, self.plan.retired, self._wakers_by_key
        listed, domain = state.listed, state.domain
        here = anchor._sort_key
        for node, value in given:
            if node in listed:
                continue
            # first: most users have no rule filed under their key (looked up here, not by a call)
            wakers = by_key.get((node.op, node.target), _UNSEEN)
            if wakers is _UNSEEN:
                wakers = self._wakers_at(node)
            if wakers is None:
                continue
            satisfiers, admitted = wakers
            # most new inputs are nodes, of few distinct ops and targets per key: whether they are admitted is
            # mostly known, and a known refusal ends the tests first (the others only read sets and positions)
            value_key = (value.op, value.target) if isinstance(value, Node) else None
            admits = admitted.get(value_key) if value_key is not None else None
            if admits is False or node in retired or (domain is not None and node not in domain) \
                    or node._sort_key <= here:
                continue
            if admits is None:  # asked where the tests above let it be asked, as each node was before
                admits = satisfiers.admit(value)
                if value_key is not None:
                    admitted[value_key] = admits
                if not admits:
                    continue
            listed.add(node)
            heapq.heappush(state.woken, (node._sort_key, id(node), node))

    def _wake_beyond_domain(self, anchor: Node, change: Rewrite) -> None:
        """Queue the nodes ahead, outside a later pass's domain, whose match may contain a node ``change``
        touched (given a new input, or left with fewer users; with guards that count users, also one given
        a new user): a pass that visited every node would look at them after this rewrite, in this pass.

        Such a match lies at most ``depth - 1`` use edges after the touched node (``depth`` when guards
        count users: the node may be a capture).  The domain holds the nodes whose outcome the previous
        pass's changes may have changed; a node outside it is left out only until a change reaches it.
        """
        state, retired, reach = self._pass, self.plan.retired, self.plan.reach
        domain, listed = state.domain, state.listed
        assert domain is not None
        here = anchor._sort_key
        steps = reach.depth if reach.counts_users else reach.depth - 1
        layer: set[Node] = {user for user, _ in change.redirected} | set(change.lost_users)
        if reach.counts_users:
            layer |= set(change.gained_users)
        seen: set[Node] = set()
        for level in range(steps + 1):
            for node in layer - seen:
                if node in domain or node in listed or node in retired or node._sort_key <= here:
                    continue
                if self.plan.may_anchor(node):
                    listed.add(node)
                    heapq.heappush(state.woken, (node._sort_key, id(node), node))
            seen |= layer
            if level < steps:
                layer = set().union(*[n.users for n in layer]) - seen

    def _wakers_at(self, node: Node) -> _Wakers | None:
        """What may satisfy a required argument of the rules filed under the node's key (None: no rule is),
        once per key; with the nodes asked about so far (:class:`_Wakers`)."""
        key = (node.op, node.target)
        try:
            return self._wakers_by_key[key]
        except KeyError:
            rules = self.plan.index.rules_at(node)
            compiled = self.plan.compiled
            found = self._wakers_by_key[key] = None if not rules else _Wakers(functools.reduce(
                operator.or_, (compiled[id(rule)].satisfiers for rule in rules), Satisfiers()), {})
            return found

    def _worklist(self, touched: set[Node]) -> tuple[set[Node], set[Node]]:
        """Every node that rules may anchor at and whose match may contain a touched node, narrowed; and the
        region it was narrowed from (the next pass's domain).

        A changed node (new, with new inputs, or with fewer users) lies at most ``depth - 1`` use edges
        before the anchor of any match that contains it.  When guards count users, a node whose users
        changed may also be a capture, an argument of a matched node: ``depth`` use edges before.
        """
        plan, reach, retired = self.plan, self.plan.reach, self.plan.retired
        seeds = touched.difference(retired)
        if reach.multi_output:  # further outputs hang off shared inputs: look upstream too
            seeds = _within(seeds, reach.depth, _INPUTS)
        region = _within(seeds, reach.depth if reach.counts_users else reach.depth - 1, _USERS)
        region.difference_update(retired)
        if len(region) <= 4 * len(plan.index.ruleset):  # a few nodes: testing each costs less than narrowing
            return {n for n in region if plan.may_anchor(n)}, region
        found = Candidates(plan.gm.graph)
        return plan.index.anchors(found, narrowing(plan.compiled, found, region), region), region

    def _settled_after(self, done: _PassState) -> set[Node]:
        """The candidates of the next pass whose outcome the pass ``done`` already knows: nothing fires there.

        A node looked at after the last rewrite that changed anything within reach of a match anchored
        there (``depth - 1`` use edges), whose matches did not overlap that pass's new nodes, sees the
        same graph around it in the next pass until that pass rewrites something: it would fire nothing
        (else the pass ``done`` would have fired there) and skip for the same reasons, already reported.
        Not when guards count users (any new use changes them) or patterns have several outputs (their
        further outputs are found among users).
        """
        if not self.settles:
            return set()
        visited, changed, steps = done.visited, done.changed, self.plan.reach.depth - 1
        return {node for node in self._candidates if node in visited and node not in done.overlapped
                and not changed_since(node, visited[node], changed, steps)}


def narrowing(compiled: Mapping[int, CompiledRule], found: Candidates,
              among: set[Node] | None = None) -> Callable[[Rule], Nodes | None]:
    """The nodes of ``found.graph`` (``among`` them) where a rule may match at most, by its compiled matcher
    in ``compiled`` (None: any node of its anchor keys); ``found`` is shared by the rules (operands' candidates,
    nodes by key)."""

    def narrowed(rule: Rule) -> Nodes | None:
        return compiled[id(rule)].candidates(found, among)

    return narrowed


def changed_since(node: Node, position: int, changed: Mapping[Node, int], steps: int) -> bool:
    """Whether ``node``, or a node at most ``steps`` use edges before it, changed at ``position`` or later."""
    latest = changed.get
    if latest(node, -1) >= position:
        return True
    layer: Iterable[Node] = node._input_nodes  # the keys of the dict behind all_input_nodes: no list made
    for step in range(steps):
        if any(latest(n, -1) >= position for n in layer):
            return True
        if step < steps - 1:
            layer = {i for n in layer for i in n._input_nodes}  # a set: diamonds would repeat nodes
    return False


def _within(seeds: set[Node], depth: int, step: Callable[[Node], Iterable[Node]]) -> set[Node]:
    """``seeds`` and the nodes at most ``depth`` steps from them (a new set)."""
    found = set(seeds)
    frontier: Iterable[Node] = seeds
    for level in range(depth):
        if level == depth - 1:  # the last step: no frontier to keep (one update in C, no set made)
            found.update(*map(step, frontier))
            break
        frontier = set().union(*map(step, frontier)) - found
        found |= frontier
    return found


_USERS = operator.attrgetter("users")
_INPUTS = operator.attrgetter("_input_nodes")  # the keys of the dict behind Node.all_input_nodes, no list made
