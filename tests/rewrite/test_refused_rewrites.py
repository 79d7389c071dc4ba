"""A rewrite refused once its replacement is made leaves nothing behind, whatever rewrites fired before it: the nodes
it made are taken back at once, so no later match of the pass sees them (as users of its captures, say)."""

from __future__ import annotations

import torch
import torch.fx

import fxrules

RULES = fxrules.parse("""
rule mul_one: x * 1 => x

rule reshape_twice: torch.reshape(torch.reshape(x, a), b) => torch.reshape(x, b)

rule sigmoid_of_three_users:
    pattern:
        return torch.sigmoid(x)
    where:
        num_users(x) == 3
    replace:
        return torch.tanh(x)
""")


def _model(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = y * 1
    r = torch.reshape(torch.reshape(x, (12,)), (3, 4))
    x.add_(1.0)
    return a + r + torch.sigmoid(x)


def _rewritten(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """What the rules make of :func:`_model`."""
    r = torch.reshape(torch.reshape(x, (12,)), (3, 4))
    x.add_(1.0)
    return y + r + torch.tanh(x)


def test_a_replacement_refused_after_it_is_made_is_no_user_of_its_captures_for_later_matches() -> None:
    """``y * 1 => y`` fires first (making no node); ``reshape(x, (3, 4))`` is made for the reshapes of ``x`` and
    refused (the result would share memory with ``x``, which is written after); ``x`` keeps its three users, so the
    guard of the sigmoid's rule holds."""
    gm = torch.fx.symbolic_trace(_model)
    report = fxrules.apply(gm, RULES)
    assert report.counts() == {"mul_one": 1, "sigmoid_of_three_users": 1}
    assert dict(report["reshape_twice"].skip_counts) == {"in-place write": 1}
    assert "tanh = torch.tanh(x)" in gm.code and "reshape_4" not in gm.code
    inputs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), torch.randn(3, 4)]
    torch.testing.assert_close(gm(*[t.clone() for t in inputs]), _rewritten(*[t.clone() for t in inputs]))
