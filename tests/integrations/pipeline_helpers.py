"""What the compile-pipeline tests share: a module built around one linear layer and an exported program's
save/load round trip."""

from __future__ import annotations

import io

import torch
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
