"""A symbolic dim of a ``given`` type is bound by a match only when a capture of that type is: a dim that only
some options of ``A | B`` bind (through the captures those options bind) is, like such a capture, a load error
where the guard or the replacement uses it; a dim every option binds, through whichever capture, loads and
applies."""

from __future__ import annotations

import pytest
import torch
import torch.fx

import fxrules
from fxrules import FxrLoadError

PARTLY_BOUND_HINT = "bind it in every option of 'A | B', or write one rule per option"

DIM_OF_ONE_OPTION_IN_REPLACEMENT = """\
rule r:
    given:
        x: Tensor[M]
        y: Tensor[N]
    pattern:
        return torch.neg(x) | torch.relu(y)
    replace:
        return torch.zeros(M)
"""

DIM_OF_ONE_OPTION_IN_GUARD = """\
rule r:
    given:
        x: Tensor[M]
        y: Tensor[N]
    pattern:
        return torch.add(x, 1) | torch.add(y, 2)
    where:
        M > 1
    replace:
        return torch.zeros(3)
"""

DIM_OF_EVERY_OPTION = """\
rule r:
    given:
        x: Tensor[M]
        y: Tensor[M]
    pattern:
        return torch.neg(x) | torch.relu(y)
    replace:
        return torch.zeros(M)
"""


def _diagnostics(text: str) -> list[tuple[int, int, str, str | None]]:
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse(text, filename="dims.fxr")
    return [(d.span.line, d.span.column, d.message, d.hint) for d in info.value.diagnostics]


def test_a_dim_only_one_option_binds_used_in_the_replacement_is_a_load_error_at_the_name() -> None:
    assert _diagnostics(DIM_OF_ONE_OPTION_IN_REPLACEMENT) == [
        (8, 28, "'M' is bound by only some alternatives of the pattern", PARTLY_BOUND_HINT)]


def test_a_dim_only_one_option_binds_used_in_the_guard_is_a_load_error_at_the_name() -> None:
    assert _diagnostics(DIM_OF_ONE_OPTION_IN_GUARD) == [
        (8, 9, "'M' is bound by only some alternatives of the pattern", PARTLY_BOUND_HINT)]


def test_a_dim_every_option_binds_loads_and_each_match_reads_its_own_capture() -> None:
    def program(a: torch.Tensor) -> torch.Tensor:
        return torch.relu(a).sum() + torch.neg(a[:2]).sum()

    gm = torch.fx.symbolic_trace(program)
    rules = fxrules.parse(DIM_OF_EVERY_OPTION, filename="dims.fxr")
    a = torch.randn(5)
    report = fxrules.apply(gm, rules, example_inputs=[a], static_shapes=True)
    assert report.counts() == {"r": 2}
    torch.testing.assert_close(gm(a), torch.tensor(0.0))
    assert gm.code.count("torch.zeros(") == 2
