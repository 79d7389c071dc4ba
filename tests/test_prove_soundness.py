"""fxrules.prove never proves a rule that torch shows wrong: hostile rules that are wrong on some input."""

from __future__ import annotations

import textwrap

import pytest

import fxrules
from fxrules.verification.prove import Outcome

pytest.importorskip("z3")


def prove_one(source: str) -> fxrules.verification.prove.RuleProof:
    rules = fxrules.parse(textwrap.dedent(source))
    (result,) = fxrules.prove(rules, timeout=20).results
    return result


def test_where_method_reads_self_as_the_input_not_the_condition() -> None:
    """`x.where(c, y)` is `torch.where(c, x, y)`: swapping the condition and the input is refuted, not proved."""
    wrong = prove_one("""
        rule where_method_swapped:
            given:
                c: Tensor[dtype=bool]
                x: Tensor[dtype=bool]
                y: Tensor[dtype=bool]
            pattern:
                return x.where(c, y)
            replace:
                return torch.where(x, c, y)
        """)
    assert wrong.outcome is Outcome.REFUTED
    right = prove_one("""
        rule where_method:
            given:
                c: Tensor[dtype=bool]
                x: Tensor[dtype=float32]
                y: Tensor[dtype=float32]
            pattern:
                return torch.where(c, x, y)
            replace:
                return x.where(c, y)
        """)
    assert right.outcome is Outcome.PROVED
