"""Shared helper of the prove tests: prove the one rule of a rule text."""

from __future__ import annotations

import textwrap

import fxrules
from fxrules.verification.prove import RuleProof


def prove_one(source: str, timeout: float = 30) -> RuleProof:
    """What prove says of the only rule of ``source`` (indented as a test writes it)."""
    (result,) = fxrules.prove(fxrules.parse(textwrap.dedent(source)), timeout=timeout).results
    return result
