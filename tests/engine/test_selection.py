"""Choosing rules by name: RuleSet.select, only=/exclude= on apply, verify, backend and inductor_pass."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo

import fxrules
from tests.conftest import ops, trace

RULES = """\
rule double_neg:
    torch.neg(torch.neg(x)) => x

rule relu_twice:
    torch.relu(torch.relu(x)) => torch.relu(x)

rule double_reciprocal:
    torch.reciprocal(torch.reciprocal(x)) => x
"""


def model(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.relu(torch.neg(torch.neg(x))))


@pytest.fixture
def rules() -> fxrules.RuleSet:
    return fxrules.parse(RULES, "three.fxr")


def test_select_keeps_named_rules_in_file_order(rules: fxrules.RuleSet) -> None:
    assert [rule.name for rule in rules.select(["relu_twice", "double_neg"])] == ["double_neg", "relu_twice"]
    assert [rule.name for rule in rules.select("double_*")] == ["double_neg", "double_reciprocal"]
    assert [rule.name for rule in rules.select(exclude="double_*")] == ["relu_twice"]
    assert [rule.name for rule in rules.select("double_*", exclude="*_reciprocal")] == ["double_neg"]
    assert rules.select() is rules
    assert rules.select("*") is rules  # every rule: the same set, and the same digest


@pytest.mark.parametrize(("options", "message"), [
    ({"only": "dubble_neg"}, "only: no rule named 'dubble_neg' in the rules; did you mean 'double_neg'?"),
    ({"exclude": ["relu_twice", "relu_thrice"]},
     "exclude: no rule named 'relu_thrice' in the rules; did you mean 'relu_twice'?"),
    ({"only": "fold_*"}, "only: no rule matches 'fold_*' in the rules"),
    ({"only": [3]}, "only: takes rule names or glob patterns, got int"),
])
def test_an_entry_that_names_no_rule_is_an_error(rules: fxrules.RuleSet, options: dict[str, Any],
                                                 message: str) -> None:
    with pytest.raises(fxrules.FxrUsageError) as error:
        rules.select(**options)
    assert str(error.value) == message


def test_apply_only_and_exclude(rules: fxrules.RuleSet) -> None:
    gm = trace(model)
    report = fxrules.apply(gm, rules, only=["double_neg"])
    assert ops(gm) == ["relu", "relu"]
    assert [rule.name for rule in report.rules] == ["double_neg"]
    gm = trace(model)
    assert fxrules.apply(gm, rules, exclude="double_*").counts() == {"relu_twice": 1}
    assert ops(gm) == ["neg", "neg", "relu"]


def test_apply_refuses_an_unknown_name_before_touching_the_graph(rules: fxrules.RuleSet) -> None:
    gm = trace(model)
    before = gm.code
    with pytest.raises(fxrules.FxrUsageError, match="did you mean 'relu_twice'"):
        fxrules.apply(gm, rules, only="relu_twise")
    assert gm.code == before


def test_apply_selects_from_several_files_and_bundled_names() -> None:
    gm = trace(model)
    relu = fxrules.parse("rule relu_twice:\n    torch.relu(torch.relu(x)) => torch.relu(x)\n", "relu.fxr")
    report = fxrules.apply(gm, ["algebra.fxr", relu], only=["double_neg", "relu_*"])
    assert report.counts() == {"double_neg": 1, "relu_idempotent": 1}
    assert [rule.name for rule in report.rules] == ["double_neg", "relu_idempotent", "relu_twice"]


def test_apply_program_selects(rules: fxrules.RuleSet) -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return model(x)

    x = torch.randn(3)
    program = torch.export.export(Model(), (x,))
    rewritten = fxrules.apply_program(program, "algebra.fxr", exclude="double_neg")
    assert rewritten.report.counts() == {"relu_idempotent": 1}
    torch.testing.assert_close(rewritten.program.module()(x), model(x))


def test_verify_only_and_exclude(rules: fxrules.RuleSet) -> None:
    report = fxrules.verify(rules, max_examples=10, only="double_*", exclude="*_reciprocal")
    assert [verdict.rule for verdict in report.results] == ["double_neg"]
    with pytest.raises(fxrules.FxrUsageError, match="give verify names= or only="):
        fxrules.verify(rules, names=["double_neg"], only="double_neg")


def test_backend_applies_only_the_selection(rules: fxrules.RuleSet) -> None:
    torch._dynamo.reset()
    backend = fxrules.backend(rules, then="eager", only="relu_twice")
    x = torch.randn(4)
    torch.testing.assert_close(torch.compile(model, backend=backend)(x), model(x))
    torch._dynamo.reset()
    assert [report.counts() for report in backend.reports] == [{"relu_twice": 1}]
    with pytest.raises(fxrules.FxrUsageError, match="no rule named 'nope'"):
        fxrules.backend(rules, exclude="nope")


def test_inductor_pass_takes_a_selection_and_keys_its_cache_on_it(rules: fxrules.RuleSet) -> None:
    whole = fxrules.inductor_pass(rules).uuid()
    chosen = fxrules.inductor_pass(rules, only="relu_twice")
    assert chosen.ruleset.select() is chosen.ruleset and [rule.name for rule in chosen.ruleset] == ["relu_twice"]
    assert chosen.uuid() == fxrules.inductor_pass(rules.select("relu_twice")).uuid() != whole
    rebuilt = fxrules.RuleSet(tuple(rule for rule in rules if rule.name == "relu_twice"))
    assert fxrules.inductor_pass(rebuilt).uuid() == chosen.uuid()
