"""fxrules.prove never proves a rule that torch shows wrong: hostile rules that are wrong on some input."""

from __future__ import annotations

import pytest
import torch

from fxrules.verification.prove import Outcome
from tests.verify.proving import prove_one

pytest.importorskip("z3")


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


#: Rules about out-of-range Python numbers on 8-bit tensors that prove proves: torch converts the number to
#: the tensor's dtype (wrapping), and the proof must hold on every one of the 256 values.
WRAPPING = {
    "int8_add_300": ("int8", "add(x, 300)", "add(x, 44)", lambda x: (x + 300, x + 44)),
    "uint8_add_minus_one": ("uint8", "add(x, -1)", "add(x, 255)", lambda x: (x + (-1), x + 255)),
    "uint8_lt_minus_one": ("uint8", "torch.lt(x, -1)", "torch.lt(x, 255)",
                           lambda x: (torch.lt(x, -1), torch.lt(x, 255))),
    "uint8_eq_256": ("uint8", "torch.eq(x, 256)", "torch.eq(x, 0)", lambda x: (torch.eq(x, 256), torch.eq(x, 0))),
}


@pytest.mark.parametrize("name", WRAPPING)
def test_a_proof_about_wrapping_literals_holds_on_every_8_bit_value(name: str) -> None:
    dtype, pattern, replacement, run = WRAPPING[name]
    proof = prove_one(f"""
        rule {name}:
            given:
                x: Tensor[dtype={dtype}]
            pattern:
                return {pattern}
            replace:
                return {replacement}
        """)
    assert proof.outcome is Outcome.PROVED
    every = torch.arange(256, dtype=torch.int16).to(getattr(torch, dtype))
    expected, actual = run(every)
    assert torch.equal(expected, actual)
