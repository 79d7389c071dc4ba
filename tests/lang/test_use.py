"""``use`` gives short names for targets and values, and a short name used as what it is not says what it is."""

from __future__ import annotations

import pytest
import torch

import fxrules
from fxrules.diagnostics import FxrLoadError
from tests.conftest import trace


def _relu_to_half(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x).to(torch.float16) + x.relu()


@pytest.mark.parametrize(("text", "code"), [
    ("use torch.relu as r\nrule a:\n    r(x) => torch.sigmoid(x)\n", "sigmoid = torch.sigmoid(x)"),
    ("use torch.Tensor.relu as mrelu\nrule a:\n    mrelu(x) => torch.sigmoid(x)\n", "sigmoid = torch.sigmoid(x)"),
    ("use torch.float16 as half\nrule a:\n    x.to(half) => x.half()\n", "half = relu.half()"),
], ids=["function", "tensor method", "value"])
def test_use_gives_short_names_for_targets_and_values(text: str, code: str) -> None:
    """``use`` gives extra short names for targets and values: ``r(x)`` matches what ``r`` names (a function or
    a tensor method), and ``half`` is the dtype value."""
    gm = trace(_relu_to_half)
    expected = gm(torch.randn(4))  # the rules are not sound; the test is about what they match
    report = fxrules.apply(gm, fxrules.parse(text))
    assert report.counts() == {"a": 1}
    assert code in gm.code
    assert gm(torch.randn(4)).shape == expected.shape


@pytest.mark.parametrize(("text", "message"), [
    ("rule a:\n    torch.relu(x) => F\n", "<string>:2:22: error: 'F' names a module, not a value"),
    ("use torch.relu as r\nrule a:\n    torch.neg(x) => r\n", "<string>:3:21: error: 'r' is an operation: call it"),
    ("use torch.float16 as half\nrule a:\n    half(x) => x\n",
     "<string>:3:5: error: 'half' is a value, not a function"),
])
def test_a_short_name_used_as_what_it_is_not_says_what_it_is(text: str, message: str) -> None:
    with pytest.raises(FxrLoadError) as error:
        fxrules.parse(text)
    assert message in str(error.value)
