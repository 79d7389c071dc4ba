"""verify draws the values where two formulas part: ties such as 0.5, which random floats almost never hit."""

from __future__ import annotations

import pytest

import fxrules
from fxrules.verification.soundness import Verdict


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_verify_finds_a_rounding_rule_wrong_at_halfway_values(seed: int | None) -> None:
    """round(x) and floor(x + 0.5) differ only at ties such as 0.5; with any seed, verify draws one and
    reports the rule unsound with a tie as the counterexample."""
    # typed to float32, and with a tolerance (no -0.0 check): what is left to find is the ties
    rules = fxrules.parse("@tolerance(atol=0, rtol=0)\nrule round_half_up:\n"
                          "    given:\n        x: Tensor[dtype=float32]\n"
                          "    pattern:\n        return torch.round(x)\n"
                          "    replace:\n        return torch.floor(x + 0.5)\n")
    result = fxrules.verify(rules, seed=seed)["round_half_up"]
    assert result.verdict is Verdict.UNSOUND
    assert result.counterexample is not None and ".5" in "".join(result.counterexample.inputs)
