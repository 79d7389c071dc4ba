"""Which safety checks run for a rule: a check that cannot refuse any match of the rule is not run for it
(``fxrules.match.safety.checks_for``), nor one whose graph lacks what it needs (no in-place writer, no grad-mode or
autocast region).  Each exemption is pinned from both sides: the rules it covers, and a rule just outside it that
the check still refuses."""

from __future__ import annotations

import warnings

import torch
import torch.fx

import fxrules
from fxrules.match.safety import checks_for
from tests.conftest import no_grad_graph, trace


def _rule(text: str) -> fxrules.Rule:
    with warnings.catch_warnings():  # some rules below are meant to be refused: the loop check says so
        warnings.simplefilter("ignore")
        return fxrules.parse(f"rule r:{text}\n").rules[0]


def _run(rule: str, stage: str) -> list[str]:
    """The names of the checks of ``stage`` that run on the matches of ``rule``."""
    checks = getattr(checks_for(_rule(rule if rule.startswith("\n") else f" {rule}")), stage)
    return [check.name for check in checks.all]


def _refused(gm: torch.fx.GraphModule, rule: str) -> dict[str, int]:
    text = rule if rule.startswith("\n") else f" {rule}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = fxrules.apply(gm, fxrules.parse(f"rule r:{text}\n"))
    return dict(report["r"].skip_counts)


# ---------------------------------------------------------------- escaping_user, impure, cycle


def test_one_operation_runs_no_match_stage_check() -> None:
    assert _run("x * 1 => x", "match") == []


def test_two_operations_run_the_escaping_check_and_it_refuses_an_escaping_interior_node() -> None:
    rule = "torch.neg(torch.neg(x)) => x"
    assert _run(rule, "match") == ["escaping_user"]

    def escapes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = torch.neg(x)
        return torch.neg(n), n

    assert _refused(trace(escapes), rule) == {"escaping user": 1}


def test_a_pattern_naming_a_module_by_class_runs_the_impure_check() -> None:
    assert "impure" in _run("""
    given:
        m: nn.Module
    pattern:
        return torch.neg(m(x))
    replace:
        return x""", "match")


def test_no_cycle_check_when_every_capture_is_below_an_operation_all_others_compute_from() -> None:
    assert _run("torch.sigmoid(x) * x => F.silu(x)", "match") == ["escaping_user"]
    assert _run("torch.relu(torch.relu(x)) => torch.relu(x)", "match") == ["escaping_user"]


def test_the_cycle_check_runs_and_refuses_when_a_capture_is_an_operand_of_another_operation() -> None:
    """``n`` and ``c`` both under the product: ``c`` is no operand of ``n``'s operation, and may be computed from
    it (``c = relu(n)``), so the replacement, before the first output, would use ``c`` before it exists."""
    rule = """
    pattern:
        n = torch.neg(x)
        return n, torch.mul(n, c)
    replace:
        return torch.abs(x), torch.abs(c)"""
    assert "cycle" in _run(rule, "match")

    def computed_from_the_match(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = torch.neg(x)
        return n, torch.mul(n, torch.relu(n))

    assert _refused(trace(computed_from_the_match), rule) == {"cycle": 1}


def test_the_cycle_check_runs_and_refuses_when_no_operation_is_below_all_others() -> None:
    """Two outputs, neither computed from the other: the capture of the second may be computed from the first."""
    rule = """
    pattern:
        return torch.neg(x), torch.add(x, c)
    replace:
        return torch.abs(x), torch.sub(x, c)"""
    assert "cycle" in _run(rule, "match")

    def computed_from_the_match(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = torch.neg(x)
        return n, torch.add(x, torch.relu(n))

    assert _refused(trace(computed_from_the_match), rule) == {"cycle": 1}


# ---------------------------------------------------------------- captured_late, used_late


def test_one_output_runs_no_ordering_check_and_several_do() -> None:
    assert "captured_late" not in _run("torch.neg(torch.exp(x)) => x", "emit")
    assert "used_late" not in _run("torch.neg(torch.exp(x)) => x", "splice")
    several = """
    pattern:
        a = torch.neg(x)
        return a, torch.add(x, y)
    replace:
        return torch.abs(x), torch.sub(x, y)"""
    assert "captured_late" in _run(several, "emit")
    assert "used_late" in _run(several, "splice")


# ---------------------------------------------------------------- no_change


def test_no_change_is_not_checked_when_an_output_is_replaced_by_a_capture_below_it_or_a_literal() -> None:
    assert "no_change" not in _run("torch.neg(torch.neg(x)) => x", "splice")
    assert "no_change" not in _run("torch.mul(x, 0) => 0", "splice")
    assert "no_change" in _run("torch.relu(torch.relu(x)) => torch.relu(x)", "splice")


def test_no_change_refuses_a_name_the_pattern_gives_a_node() -> None:
    """``n`` is written like a capture in the replacement, but it names the pattern's own node."""
    rule = """
    pattern:
        n = torch.neg(x)
        return n
    replace:
        return n"""
    assert "no_change" in _run(rule, "splice")
    assert _refused(trace(lambda x: torch.neg(x)), rule) == {"no change": 1}


def test_no_change_refuses_a_capture_matched_below_another_output_that_is_this_output() -> None:
    """``y`` is below the second output, not the first: bound to the first output's node, it replaces that
    output by itself (and the second by the same call of the same node)."""
    rule = """
    pattern:
        return torch.neg(x), torch.relu(y)
    replace:
        return y, torch.relu(y)"""
    assert "no_change" in _run(rule, "splice")
    assert _refused(trace(lambda x: torch.relu(torch.neg(x))), rule) == {"no change": 1}


# ---------------------------------------------------------------- what the graph holds


def test_the_write_check_refuses_with_a_writer_in_the_graph() -> None:
    def writes(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        y.add_(1)
        return y

    assert _refused(trace(writes), "x * 1 => x") == {"in-place write": 1}


def test_the_write_check_refuses_a_replacement_node_that_writes_in_a_graph_without_writers() -> None:
    """No writer in the graph, but the replacement makes one: ``relu_(x)`` writes into ``x``, which the output
    (returned, so a caller may read it) would then share memory with."""
    def plain(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2

    assert _refused(trace(plain), "torch.relu(x) => torch.relu_(x)") == {"in-place write": 1}


def test_the_grad_mode_check_refuses_inside_a_region() -> None:
    assert _refused(no_grad_graph(), "torch.neg(torch.neg(x)) => x") == {"grad mode": 1}


# ---------------------------------------------------------------- literal_receiver


def test_no_literal_receiver_check_when_every_output_is_replaced_by_a_call() -> None:
    assert "literal_receiver" not in _run("torch.relu(torch.relu(x)) => torch.relu(x)", "splice")
    assert "literal_receiver" not in _run("x.contiguous().contiguous() => x.contiguous()", "splice")
    assert "literal_receiver" in _run("x * 1 => x", "splice")


def test_an_operator_call_of_literals_is_a_literal_and_refused_as_a_receiver() -> None:
    """``c * 1`` is computed at once when ``c`` binds a number: the output becomes the literal ``2``."""
    rule = "torch.mul(x, c) => c * 1"
    assert "literal_receiver" in _run(rule, "splice")
    assert _refused(trace(lambda y: torch.mul(y, 2).contiguous()), rule) == {"literal receiver": 1}


# ---------------------------------------------------------------- effects_kept


def _with_out(a: torch.Tensor, b: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    torch.add(a, b, out=o)
    return o.relu()


def test_effects_are_checked_where_a_pattern_lets_out_through_and_refused() -> None:
    """``...`` lets ``out=o`` through, and so does naming it: either way the write into ``o`` is refused."""
    for rule in ("torch.add(x, y, ...) => torch.sub(x, y)", "torch.add(x, y, out=o) => torch.sub(x, y)"):
        assert _refused(trace(_with_out), rule) == {"impure": 1}, rule


def test_a_pattern_leaving_inplace_out_does_not_match_an_inplace_call() -> None:
    """What lets ``F.relu(x) => x`` go without the effects check: the call it matches holds ``inplace``'s
    default."""
    def inplace(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu(x, inplace=True) + 1

    gm = trace(inplace)
    code = gm.code
    report = fxrules.apply(gm, fxrules.parse("rule r: F.relu(x) => x\n"))
    assert (report.total_fired, gm.code) == (0, code)


@torch.fx.wrap
def later_impure(x: torch.Tensor) -> torch.Tensor:
    return x


def test_a_call_registered_side_effecting_after_an_apply_is_kept_by_the_next() -> None:
    """Which calls are impure is torch's registry, read again by each ``apply``: a function registered between
    two applies is kept by the second."""
    rules = fxrules.parse(f"rule drop:\n    {__name__}.later_impure(x) => x\n", "effects.fxr", allow=[__name__])

    def f(x: torch.Tensor) -> torch.Tensor:
        return later_impure(x.relu()) + 1

    assert fxrules.apply(trace(f), rules).counts() == {"drop": 1}
    torch.fx.node.has_side_effect(later_impure)
    try:
        gm = trace(f)
        assert fxrules.apply(gm, rules)["drop"].skip_counts == {"impure": 1}
        assert "later_impure(" in gm.code
    finally:
        torch.fx.node._side_effectful_functions.discard(later_impure)
