"""Bounded work: literal folding and guard arithmetic have a size bound, and matching a rule at a node has
a step budget.

Without these bounds each hostile shape below runs for more than 30 seconds (or grows to gigabytes); each
must finish within ``SECONDS`` with a stated outcome: a load error with its location, a skip reason in
the report (``literal bound``, ``budget``), the same answer from ``apply`` and ``explain=True``.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx

import fxrules
from fxrules.diagnostics import FxrLoadError
from tests.conftest import trace

#: A generous bound for a machine shared with other jobs: each shape takes well under a second alone.
SECONDS = 5.0


def timed(action: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = action()
    elapsed = time.perf_counter() - started
    assert elapsed < SECONDS, f"took {elapsed:.1f} s"
    return result


def load_error(text: str) -> str:
    with pytest.raises(FxrLoadError) as raised:
        timed(lambda: fxrules.parse(text, "hostile.fxr"))
    return str(raised.value)


# ---------------------------------------------------------------- literal folding


@pytest.mark.parametrize(("expression", "message"), [
    ("10 ** 10 ** 10", "10 ** 10000000000 would have more than 4096 bits"),
    ("operator.lshift(1, 10 ** 10)", "1 << 10000000000 would have more than 4096 bits"),
    ("2 ** 4097", "2 ** 4097 would have more than 4096 bits"),
    ("3 ** 3000", "3 ** 3000 is an integer of 4755 bits (the bound is 4096)"),
    ("[0] * 10 ** 9", "repeating a sequence 1000000000 times would make more than 65536 items"),
    ("'ab' * 40000", "repeating a sequence 40000 times would make more than 65536 items"),
    ("'%0999999999d' % 1", "'%0999999999d' % 1: string formatting is not computed in rule files"),
    ("operator.mod('%*d' * 40, (10 ** 9, 1) * 40)",
     "'%*d%*d%*d%*d%*d%*d%*d%*d%*d%*d%*d%*d... % (1000000000, 1, 1000000000, 1, 1000000000, ...): "
     "string formatting is not computed in rule files"),
    ("[[0] * 65536] * 2", "repeating a sequence 2 times would make more than 65536 items"),
    ("[[[0] * 255] * 255] * 2", "repeating a sequence 2 times would make more than 65536 items"),
    ("[[0] * 40000] + [[1] * 40000]",
     "[[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ...]] + [[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, ...]] is more "
     "than 65536 items long, nested ones included (the bound is 65536)"),
    ("[0] * 40000 + [1] * 40000", "[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ...] + [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
                                  "1, 1, 1, 1, ...] is 80000 items long (the bound is 65536)"),
    ("[[0] * 60000] * 60000", "repeating a sequence 60000 times would make more than 65536 items"),
    ("[[[0] * 200] * 200] * 200", "repeating a sequence 200 times would make more than 65536 items"),
    ("[[0] * 300] * 200 + [[0] * 300] * 20",
     "[[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ...], ...] + [[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ...], ...] "
     "is more than 65536 items long, nested ones included (the bound is 65536)"),
    ("2.0 ** 100000", "2.0 ** 100000 overflows a float"),
])
def test_a_written_literal_over_the_bound_is_a_load_error_at_the_expression(expression: str, message: str) -> None:
    error = load_error(f"rule huge:\n    x.reshape({expression}) => x\n")
    assert f"hostile.fxr:2:15: error: literal too large: {message}" in error
    assert "        x.reshape(" in error and "\n                  ^" in error
    assert "hint: literal arithmetic is computed at most to integers of 4096 bits" in error


def test_a_replacement_literal_over_the_bound_is_a_load_error_too() -> None:
    error = load_error("rule huge:\n    torch.neg(x) => x.reshape(2 ** 2 ** 20)\n")
    assert "hostile.fxr:2:31: error: literal too large: 2 ** 1048576 would have more than 4096 bits" in error


@pytest.mark.parametrize("expression", ["2 ** 4095", "[0] * 65536", "-(10 ** 1000)", "1 // 0"])
def test_literals_within_the_bound_load(expression: str) -> None:
    """Up to the bound, literal arithmetic loads as before (``1 // 0`` is an argument no graph holds)."""
    rules = timed(lambda: fxrules.parse(f"rule r:\n    x.reshape({expression}) => x\n"))
    assert [rule.name for rule in rules] == ["r"]



@pytest.mark.parametrize(("expression", "message"), [
    ("math.factorial(10 ** 7)", "math.factorial(10000000) would have more than 4096 bits"),
    ("math.comb(10 ** 7, 5 * 10 ** 6)", "math.comb(10000000, 5000000) would have more than 4096 bits"),
    ("math.perm(10 ** 7)", "math.perm(10000000) would have more than 4096 bits"),
    ("math.perm(2 ** 4000, 2)", "math.perm(<an integer of 4001 bits>, 2) would have more than 4096 bits"),
    ("math.prod([2 ** 4000] * 60000)", "math.prod([<an integer of 4001 bits>, ...]) would have more than 4096 bits"),
    ("math.prod([2 ** 4000] * 60000, start=3)",
     "math.prod([<an integer of 4001 bits>, ...], start=3) would have more than 4096 bits"),
    ("math.lcm(2 ** 4000 - 1, 2 ** 4000 + 1)",
     "math.lcm(<an integer of 4000 bits>, <an integer of 4001 bits>) would have more than 4096 bits"),
])
def test_a_math_function_of_literals_over_the_bound_is_a_load_error(expression: str, message: str) -> None:
    """``math`` functions of literals whose result grows without bound are refused before they are computed,
    in a pattern or a replacement (``verify`` and the rewritten model would otherwise compute them)."""
    for rule in (f"rule huge:\n    x.reshape({expression}) => x\n",
                 f"rule huge:\n    torch.neg(x) => torch.add(x, {expression})\n"):
        assert f"error: literal too large: {message}" in load_error(rule)


@pytest.mark.parametrize("expression", [
    "math.factorial(400)", "math.comb(10 ** 18, 2)", "math.perm(1000, 3)", "math.prod([2 ** 40] * 90)",
    "math.lcm(12, 18)", "math.factorial(-1)", "math.sqrt(2.0)"])
def test_math_functions_of_literals_within_the_bound_load(expression: str) -> None:
    rules = timed(lambda: fxrules.parse(f"rule r:\n    torch.neg(x) => torch.add(x, {expression})\n"))
    assert [rule.name for rule in rules] == ["r"]


def test_comparing_nested_literals_cannot_take_longer_than_the_bound_allows() -> None:
    """The bound counts nested items: a list of 65,536 references to one list of 65,536 items cost nothing to
    build but seconds to compare, and each further level multiplied that by 65,536 (a hang in fxrules check)."""
    nested = "[[[0] * 65536] * 65536] * 2"
    error = load_error(f"rule huge:\n    x.reshape(operator.eq({nested}, {nested})) => x\n")
    assert "error: literal too large: repeating a sequence 65536 times would make more than 65536 items" in error

SQUARING = """
rule squared_literal:
    given:
        c: int
    pattern:
        return torch.mul(x, c)
    replace:
        return torch.mul(x, c * c)
"""


def test_a_replacement_that_squares_its_literal_stops_at_the_bound_with_a_skip() -> None:
    """3 squared 11 times has 3247 bits; once more would be 6493: that rewrite is skipped, not computed."""
    gm = trace(lambda x: torch.mul(x, 3))
    report = timed(lambda: fxrules.apply(gm, fxrules.parse(SQUARING, "squaring.fxr"), max_passes=40))
    rule = report["squared_literal"]
    assert (rule.fired, rule.skip_counts) == (11, {"literal bound": 1})
    assert rule.skipped[0].detail == ("squaring.fxr:8:29: <an integer of 3247 bits> * <an integer of 3247 bits> is "
                                      "an integer of 6493 bits (the bound is 4096)")
    assert "(literal bound): mul_11: squaring.fxr:8:29:" in str(report)
    (mul,) = [node for node in gm.graph.nodes if node.op == "call_function"]
    assert mul.args[1] == 3 ** 2 ** 11


def test_a_float_that_overflows_at_apply_is_a_literal_bound_skip() -> None:
    """A captured float raised to a power beyond float64 skips the rewrite; the apply goes on."""
    rules = fxrules.parse("rule r:\n    given:\n        c: float\n    pattern:\n        return torch.mul(x, c)\n"
                          "    replace:\n        return torch.mul(x, c ** 400)\n", "overflow.fxr")
    gm = trace(lambda x: torch.mul(x, 10.0))
    report = timed(lambda: fxrules.apply(gm, rules))
    (skip,) = report["r"].skipped
    assert (skip.reason, skip.detail) == ("literal bound", "overflow.fxr:7:29: 10.0 ** 400 overflows a float")
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), x * 10.0)


@pytest.mark.parametrize("comparison", ["[[0] * 60000] * 60000 == [[0] * 60000] * 60000",
                                        "max([[0] * 60000] * 60000) != [1]", "0 in [[0] * 60000] * 60000"])
def test_a_guard_cannot_build_a_nested_sequence_over_the_bound(comparison: str) -> None:
    """A list of 60000 lists of 60000 items is one small object in memory, but comparing it walks 3.6 billion
    items: each guard evaluation is refused as a guard error instead of taking seconds."""
    gm = trace(lambda x: torch.neg(x))
    report = timed(lambda: fxrules.apply(gm, fxrules.parse(f"rule r: torch.neg(x) => x where {comparison}\n")))
    (skip,) = report["r"].skipped
    assert skip.reason == "guard error"
    assert "repeating a sequence 60000 times would make more than 65536 items: too large for a guard" in skip.detail


def test_guard_arithmetic_uses_the_same_bound() -> None:
    gm = trace(lambda x: torch.neg(x))
    report = fxrules.apply(gm, fxrules.parse("rule r: torch.neg(x) => x where 3 ** 3000 > 0\n"))
    (skip,) = report["r"].skipped
    assert skip.reason == "guard error"
    assert "3 ** 3000 is an integer of 4755 bits (the bound is 4096): too large for a guard" in skip.detail


# ---------------------------------------------------------------- the match budget

DEPTH = 16


def commutative_chain(guard: str) -> fxrules.RuleSet:
    """``b16 = (... (v + w1) + w2 ...) + w16``: every ``+`` commutative."""
    lines = ["rule chain:", "    pattern:", "        b1 = v + w1"]
    lines += [f"        b{i} = b{i - 1} + w{i}" for i in range(2, DEPTH + 1)]
    lines += [f"        return b{DEPTH}", "    where:", f"        {guard}", "    replace:", "        return v"]
    return fxrules.parse("\n".join(lines) + "\n")


def doubling_graph() -> torch.fx.GraphModule:
    """``a = a' + a'`` seventeen times: both operands of every add are the same node."""
    graph = torch.fx.Graph()
    value = graph.placeholder("x")
    for _ in range(DEPTH + 1):
        value = graph.call_function(operator.add, (value, value))
    graph.output(value)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("explain", [False, True])
def test_identical_commutative_operands_are_not_tried_swapped(explain: bool) -> None:
    """2 ** 16 operand orders would all match the same nodes; one is tried, so the false guard is
    reached once per anchor (the two anchors deep enough for the pattern) and no budget is needed."""
    report = timed(lambda: fxrules.apply(doubling_graph(), commutative_chain("v is None"), explain=explain))
    assert report["chain"].skip_counts == {"guard false": 2}


def test_identical_commutative_operands_still_match() -> None:
    gm = doubling_graph()
    report = timed(lambda: fxrules.apply(gm, commutative_chain("v is not None")))
    assert report.fired("chain") == 1  # at the first anchor deep enough; the chain below it is dead then
    assert [node.args for node in gm.graph.nodes if node.op == "call_function"] == [(gm.graph.find_nodes(
        op="placeholder")[0],) * 2]


def alternative_stack(depth: int, guard: str) -> str:
    """``y_k = (y * 2) | (2 * y)``: on ``y * 2`` both options match (the second with its operands swapped)."""
    lines = ["rule stack:", "    pattern:", "        y1 = (x * 2) | (2 * x)"]
    lines += [f"        y{i} = (y{i - 1} * 2) | (2 * y{i - 1})" for i in range(2, depth + 1)]
    chain = "x"
    for _ in range(depth):
        chain = f"({chain} * 2)"
    lines += [f"        return y{depth}", "    where:", f"        {guard}", "    replace:", f"        return {chain}"]
    return "\n".join(lines) + "\n"


def doubling_chain(x: torch.Tensor) -> torch.Tensor:
    for _ in range(14):
        x = x * 2
    return x


def test_a_stack_of_alternatives_under_a_false_guard_loads_quickly() -> None:
    """Loading matches every rule against every replacement (the loop check): this replacement is the
    chain the pattern's 2 ** 12 option choices all match."""
    rules = timed(lambda: fxrules.parse(alternative_stack(12, "x is None")))
    assert [rule.name for rule in rules] == ["stack"]


@pytest.mark.parametrize("explain", [False, True])
def test_a_rule_over_its_budget_is_skipped_with_reason_budget(explain: bool) -> None:
    rules = fxrules.parse(alternative_stack(12, "x is None"))
    gm = trace(doubling_chain)
    before = gm.code
    report = timed(lambda: fxrules.apply(gm, rules, explain=explain))
    rule = report["stack"]
    assert rule.fired == 0 and set(rule.skip_counts) == {"budget"}
    assert rule.skipped[0].detail == ("gave up after 1000 match steps at this node: the pattern's alternatives and "
                                      "commutative operand orders give too many ways to match here")
    assert f"skipped stack x{rule.skip_counts['budget']} (budget): " in str(report)
    assert gm.code == before


def test_explain_and_apply_skip_the_same_nodes_for_budget() -> None:
    rules = fxrules.parse(alternative_stack(12, "x is None"))
    fast, explained = (fxrules.apply(trace(doubling_chain), rules, explain=e)["stack"] for e in (False, True))
    assert {s.node for s in fast.skipped} == {s.node for s in explained.skipped}
    assert fast.skip_counts == explained.skip_counts


def test_explain_lists_a_budget_skip_as_a_near_miss() -> None:
    report = fxrules.apply(trace(doubling_chain), fxrules.parse(alternative_stack(12, "x is None")), explain=True)
    conditions = {miss.condition for miss in report["stack"].near_misses}
    assert conditions == {"budget"}
    assert "near miss stack at mul_13: budget: gave up after 1000 match steps at this node" in str(report)


def test_a_deep_stack_of_alternatives_loads_and_applies_within_the_budget() -> None:
    """24 levels: every walk over the pattern must visit a name shared by both options once, not 2 ** 24
    times (the pattern's depth, computed when the rule set is compiled, once did)."""
    rules = timed(lambda: fxrules.parse(alternative_stack(24, "x is None")))
    report = timed(lambda: fxrules.apply(trace(doubling_chain), rules))
    assert report["stack"].fired == 0 and set(report["stack"].skip_counts) <= {"budget"}


def test_a_stack_of_alternatives_within_the_budget_matches() -> None:
    """Six levels: 64 ways, within the budget; the first one is used."""
    gm = trace(doubling_chain)
    text = alternative_stack(6, "x is not None").replace("return ((((((x * 2) * 2) * 2) * 2) * 2) * 2)",
                                                         "return x * 64")
    report = fxrules.apply(gm, fxrules.parse(text))
    assert report.fired("stack") >= 1 and report["stack"].skip_counts == {}
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), doubling_chain(x))


def test_alternatives_that_bind_differently_are_bounded_by_the_budget() -> None:
    """``torch.cat([a0 | b0, ..., a15 | b15])``: 2 ** 16 structural matches that bind different names, each
    refused by a guard that holds for none."""
    items = ", ".join(f"a{i} | b{i}" for i in range(16))
    rules = fxrules.parse(f"rule cat_choices:\n    pattern:\n        c = torch.cat([{items}])\n        return c\n"
                          "    where:\n        c is None\n    replace:\n        return torch.neg(c)\n")
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.cat, ([x] * 16,)))
    for explain in (False, True):
        report = timed(lambda e=explain: fxrules.apply(torch.fx.GraphModule(torch.nn.Module(), graph), rules,
                                                       explain=e))
        assert report["cat_choices"].skip_counts == {"budget": 1}


def test_the_budget_leaves_ordinary_choices_alone() -> None:
    """Commutative operands in either order and alternatives at several levels: every site fires, with
    the fast path and with explain (the generic matcher) alike."""
    rules = fxrules.parse("""
rule fma:
    pattern:
        return (a * b) + c | torch.add(a * b, c)
    replace:
        return torch.addcmul(c, a, b)
""")

    def sites(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x * y) + y, y + (x * x), torch.add(y * y, x)

    for explain in (False, True):
        gm = trace(sites)
        report = fxrules.apply(gm, rules, explain=explain)
        assert report.fired("fma") == 3 and report["fma"].skip_counts == {}
        x, y = torch.randn(3), torch.randn(3)
        torch.testing.assert_close(gm(x, y), sites(x, y))


MULTI_OUTPUT = fxrules.parse("""
rule three_of_x:
    pattern:
        a = torch.relu(x)
        b = torch.sigmoid(x)
        c = torch.tanh(x)
        return a, b, c
    replace:
        return torch.clamp_min(x, 0.0), torch.sigmoid(x), torch.tanh(x)
""")


def shared_input_graph(pairs: int, others: int, tanh: bool) -> torch.fx.GraphModule:
    """``x`` used by ``pairs`` relu and sigmoid nodes, ``others`` neg nodes, and a tanh or not."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    targets = [torch.relu, torch.sigmoid] * pairs + [torch.neg] * others + ([torch.tanh] if tanh else [])
    graph.output(tuple(graph.call_function(target, (x,)) for target in targets))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("explain", [False, True])
def test_a_multi_output_pattern_over_a_shared_input_is_bounded_by_the_budget(explain: bool) -> None:
    """Each node tried as a further output is a step: over an input with 700 users, matching the three outputs
    at each relu is skipped with reason ``budget`` instead of scanning every user for every partial match."""
    gm = shared_input_graph(100, 500, tanh=False)
    report = timed(lambda: fxrules.apply(gm, MULTI_OUTPUT, explain=explain))
    assert report["three_of_x"].skip_counts == {"budget": 100}


def test_a_multi_output_pattern_over_a_few_users_still_matches() -> None:
    gm = shared_input_graph(1, 20, tanh=True)
    x = torch.randn(4)
    expected = gm(x)
    assert fxrules.apply(gm, MULTI_OUTPUT).counts() == {"three_of_x": 1}
    torch.testing.assert_close(gm(x), expected)


def test_a_fold_that_fails_on_one_match_skips_that_match_only() -> None:
    """``1.0 / c`` folded where the match bound ``c = 0.0`` is a ``fold error`` skip there; elsewhere the rule
    fires, and the apply does not fail."""
    rules = fxrules.parse("rule reciprocal:\n    given:\n        c: float\n    pattern:\n"
                          "        return torch.div(x, c)\n    replace:\n        return torch.mul(x, 1.0 / c)\n",
                          "fold.fxr")
    gm = trace(lambda x: torch.div(x, 0.0) + torch.div(x, 2.0))
    report = fxrules.apply(gm, rules)
    rule = report["reciprocal"]
    assert (rule.fired, rule.skip_counts) == (1, {"fold error": 1})
    assert rule.skipped[0].detail == "fold.fxr:7:29: ZeroDivisionError: float division by zero"
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), torch.div(x, 0.0) + x * 0.5)


# ---------------------------------------------------------------- guard arithmetic

@pytest.mark.parametrize("guard", ["2 ** 10 ** 7 > 0", "len([0] * 10 ** 7) > 0", "len('ab' * 10 ** 7) > 0"])
def test_guard_arithmetic_is_bounded(guard: str) -> None:
    """Guard arithmetic has a size bound: a huge power or repetition (a C-level big-integer power no signal
    interrupts) is not computed; the guard fails and the report says why."""
    gm = trace(lambda x: torch.neg(x))
    report = fxrules.apply(gm, fxrules.parse(f"rule r: torch.neg(x) => x where {guard}\n"))
    assert report.counts() == {}
    assert "too large for a guard" in str(report)


@pytest.mark.parametrize("guard", ["2 ** 10 == 1024", "(-2) ** 3 == -8", "2 ** -1 == 0.5", "len([1] * 3) == 3",
                                   "x.shape[0] * 2 == 6"])
def test_guard_arithmetic_within_bounds_works(guard: str) -> None:
    gm = trace(lambda x: torch.neg(x).exp())  # not returning its input: that rewrite is skipped ('alias')
    report = fxrules.apply(gm, fxrules.parse(f"rule r: torch.neg(x) => x where {guard}\n"),
                           example_inputs=(torch.zeros(3),), static_shapes=True)
    assert report.counts() == {"r": 1}
