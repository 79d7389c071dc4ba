"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch._dynamo


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Dynamo's caches emptied before and after the test, so no compiled graph or backend leaks between tests."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
