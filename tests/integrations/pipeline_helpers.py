"""What the compile-pipeline tests share: a module built around one linear layer, an exported program's
save/load round trip, and the check that Inductor with a custom pass computes what eager does."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import torch
import torch._inductor.config
from torch.export import ExportedProgram


class WithLinear(torch.nn.Module):
    """An ``nn.Linear(8, 8)`` as ``self.linear``; subclasses write the ``forward`` around it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)


def round_trip(program: ExportedProgram) -> ExportedProgram:
    """``program`` saved with ``torch.export.save`` and loaded back."""
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    return torch.export.load(buffer)


def assert_inductor_computes_as_eager(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                                      **passes: Any) -> None:
    """``torch.compile(fn)(x)`` equals ``fn(x)`` (without grad), Inductor running ``passes`` (its custom-pass
    options, as in ``post_grad_custom_post_pass=graph_pass``) and no FX graph cache, so every pass runs."""
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False, **passes):
        torch.testing.assert_close(torch.compile(fn)(x), fn(x))
