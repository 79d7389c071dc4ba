"""Families whose first member is an ``nn.Module``: their arguments are the module's, ``forward``'s parameters then
the constructor's attributes, by position and by name, with the module's defaults; a default is the default
whatever the type it is written with.  Each case gives the same outcome with narrowing, with ``explain=True`` and
when every node is visited."""

from __future__ import annotations

import pytest
import torch
import torch.fx

from tests.engine.test_narrowing import assert_same_everywhere, fired


class _ReluModuleAndFunction(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = torch.nn.ReLU()
        self.act_inplace = torch.nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # each result computed: a graph returning its input x (twice) would make those rewrites skip ('alias')
        return (torch.neg(self.act(x)).exp(), torch.neg(torch.relu(x)).cos(),
                torch.neg(self.act_inplace(torch.sigmoid(x))))


@pytest.mark.parametrize("pattern", ["act(x)", "act(x, inplace=False)"])
def test_a_module_first_family_matches_its_module_and_its_functions_at_their_defaults(pattern: str) -> None:
    """The family's parameters are nn.ReLU's: ``input`` and the constructor's ``inplace`` (default False).
    ``act(x)`` leaves ``inplace`` out, so it matches ``nn.ReLU()`` (inplace at its default) and
    ``torch.relu`` (no such argument: the default), not ``nn.ReLU(inplace=True)``; naming
    ``inplace=False`` is the same."""
    rules = f"""
family act = nn.ReLU | torch.relu

rule neg_act:
    torch.neg({pattern}) => x
"""
    gm = torch.fx.symbolic_trace(_ReluModuleAndFunction())
    outcome = assert_same_everywhere(gm, rules)
    assert fired(outcome) == {"neg_act": 2}
    assert "self.act(" not in outcome["code"] and "torch.relu" not in outcome["code"]
    assert "self.act_inplace(" in outcome["code"]


class _Softmaxes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sm = torch.nn.Softmax(dim=1)
        self.sm0 = torch.nn.Softmax(dim=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sm(x) + torch.softmax(x, 1) + torch.softmax(x, dim=1) + self.sm0(x) + torch.softmax(x, 0)


@pytest.mark.parametrize("pattern", ["sm(x, 1)", "sm(x, dim=1)"])
def test_a_module_first_family_takes_constructor_attributes_by_position_and_by_name(pattern: str) -> None:
    """A family's arguments are its first member's, by position and by name (docs/language.md, section 9); for
    a module, the constructor's attributes follow ``forward``'s parameters, so ``sm(x, 1)`` matches
    ``nn.Softmax(dim=1)`` as well as ``torch.softmax(x, 1)``."""
    rules = f"""
family sm = nn.Softmax | torch.softmax

rule softmax_to_sigmoid:
    {pattern} => torch.sigmoid(x)
"""
    gm = torch.fx.symbolic_trace(_Softmaxes())
    outcome = assert_same_everywhere(gm, rules)
    assert fired(outcome) == {"softmax_to_sigmoid": 3}
    assert outcome["code"].count("torch.sigmoid(x)") == 3
    assert "self.sm0(x)" in outcome["code"] and "torch.softmax(x, 0)" in outcome["code"]


@pytest.mark.parametrize("pattern", ["add(x, 0)", "torch.add(x, 0)"])
def test_an_extra_argument_at_its_default_is_the_default_in_families_as_in_calls(pattern: str) -> None:
    """``alpha=1`` and ``alpha=1.0`` are both ``torch.add``'s default, whether the pattern names the target or
    a family it belongs to (the default's type does not matter, so ``add(x, 0)`` matches
    ``torch.add(x, 0, alpha=1.0)``); ``alpha=2`` is not the default either way."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.add(x, 0, alpha=1.0) * torch.add(x, 0, alpha=1) * torch.add(x, 0, alpha=2)

    outcome = assert_same_everywhere(torch.fx.symbolic_trace(f), f"rule add_zero:\n    {pattern} => x\n")
    assert fired(outcome) == {"add_zero": 2}
    assert "alpha = 2" in outcome["code"] and "alpha = 1" not in outcome["code"]
