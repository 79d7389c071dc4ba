"""End-to-end: a first rule file, as docs/language.md opens with, rewrites a traced function."""

import torch

from tests.conftest import assert_rewrites

RULES = """
rule double_neg:
    torch.neg(torch.neg(x)) => x

rule mul_one:
    x * 1 => x

rule add_zero:
    x + 0 => x
"""


def test_first_example_rules_rewrite_and_keep_outputs() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.exp(torch.neg(torch.neg(x)) * 1 + 0)  # the graph may not return its input ('alias')

    assert_rewrites(f, RULES, [torch.randn(3)], ["exp"], fired={"double_neg": 1, "mul_one": 1, "add_zero": 1})
