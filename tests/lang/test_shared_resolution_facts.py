"""What resolving rules finds once and reuses (a call shape's explanation, a module class's family signature,
the builder of each guard expression kind) still gives every call, family and guard its own outcome: its own
place in its own file, its own keyword name, its own module attribute."""

from __future__ import annotations

import operator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the name rule files use

import fxrules
from fxrules import FxrLoadError
from tests.conftest import trace


def test_calls_of_one_shape_are_each_reported_at_their_own_place_in_their_own_file(tmp_path: Path) -> None:
    """An unknown keyword, a positional argument too many and a missing argument, each written in an included
    file and again (same call shape, other columns, other keyword names) in the including one."""
    (tmp_path / "sub.fxr").write_text("rule s1: torch.sum(x, dimm=1) => x\nrule s2:   torch.relu(x, 1) => x\n"
                                      "rule s3: aten.add(x) => x\nrule s4: torch.sum(x, dimz=1) => x\n")
    (tmp_path / "top.fxr").write_text('rule t1: torch.neg(torch.sum(x, dimm=1)) => x\ninclude "sub.fxr"\n'
                                      "rule t2: torch.neg(x) => torch.relu(x, 2)\n"
                                      "rule t3: torch.neg(aten.add(x)) => x\n")
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "top.fxr")
    assert str(info.value).replace(str(tmp_path), "DIR") == (
        "DIR/sub.fxr:1:23: error: torch.sum() has no parameter 'dimm'\n"
        "    rule s1: torch.sum(x, dimm=1) => x\n"
        "                          ^\n"
        "  hint: did you mean 'dim'?\n"
        "DIR/sub.fxr:2:26: error: torch.relu() takes at most 1 positional argument but 2 were given\n"
        "    rule s2:   torch.relu(x, 1) => x\n"
        "                             ^\n"
        "  hint: its parameters are (input)\n"
        "DIR/sub.fxr:3:10: error: aten.add() is missing the required argument 'other'\n"
        "    rule s3: aten.add(x) => x\n"
        "             ^\n"
        "  hint: its parameters are (input, other, alpha)\n"
        "DIR/sub.fxr:4:23: error: torch.sum() has no parameter 'dimz'\n"
        "    rule s4: torch.sum(x, dimz=1) => x\n"
        "                          ^\n"
        "  hint: did you mean 'dim'?\n"
        "DIR/top.fxr:1:33: error: torch.sum() has no parameter 'dimm'\n"
        "    rule t1: torch.neg(torch.sum(x, dimm=1)) => x\n"
        "                                    ^\n"
        "  hint: did you mean 'dim'?\n"
        "DIR/top.fxr:3:40: error: torch.relu() takes at most 1 positional argument but 2 were given\n"
        "    rule t2: torch.neg(x) => torch.relu(x, 2)\n"
        "                                           ^\n"
        "  hint: its parameters are (input)\n"
        "DIR/top.fxr:4:20: error: aten.add() is missing the required argument 'other'\n"
        "    rule t3: torch.neg(aten.add(x)) => x\n"
        "                       ^\n"
        "  hint: its parameters are (input, other, alpha)")


class _TwoSoftmaxes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.one = torch.nn.Softmax(dim=1)
        self.zero = torch.nn.Softmax(dim=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.one(x) + self.zero(x) + F.softmax(x, 0) + torch.softmax(x, 1)


def test_two_families_led_by_one_module_class_each_match_by_their_own_call() -> None:
    """``sm(x, 1)`` (by position) matches the module whose ``dim`` is 1 and ``torch.softmax(x, 1)``;
    ``gsm(x, dim=0)`` (by name) the module whose ``dim`` is 0 and ``F.softmax(x, 0)``."""
    gm = trace(_TwoSoftmaxes())
    fxrules.apply(gm, fxrules.parse("family sm = nn.Softmax | torch.softmax\nfamily gsm = nn.Softmax | F.softmax\n"
                                    "rule a: sm(x, 1) => torch.exp(x)\nrule b: gsm(x, dim=0) => torch.sin(x)\n"))
    calls = [node.target for node in gm.graph.nodes if node.op == "call_function"]
    assert calls == [torch.exp, torch.sin, operator.add, torch.sin, operator.add, torch.exp, operator.add]


GUARDS = """\
rule a: torch.add(x, c) => x where x.shape[0:1] == 2
rule b: torch.add(x, c) => x where x.shape[0] @ 2 == 1
rule c: torch.add(x, c) => x where x.size(dim=0) == 1
rule d: torch.add(x, c) => x where x.relu() == 1
rule e: torch.add(x, c) => x where x._base is None
rule f: torch.add(x, c) => x where zz == 1
rule g: torch.add(x, c) => x where [x.dim(), -c, not c, c and c, (c,), float32][0] == 1
rule h: torch.add(x, c) => x where x.shape[...] == 1
"""


def test_every_guard_expression_kind_is_built_or_refused_by_its_own_rule() -> None:
    """Indexing, operators, calls, attributes and names each say what is wrong with them at their own place;
    lists, tuples, unary and boolean operators, ``not``, comparisons and dtype names build (rule g); an
    ellipsis is no guard expression."""
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse(GUARDS, "g.fxr")
    assert [(d.span.line, d.span.column, d.message) for d in info.value.diagnostics] == [
        (1, 36, "a guard may index with one value, as in x.shape[0]"),
        (2, 36, "operator '@' is not available in guards"),
        (3, 43, "guard functions take no keyword arguments"),
        (4, 36, "guards may call only len, all, any, min, max, abs, list, tuple, inverse_permutation, is_static, "
                "num_users, broadcasts_to, is_computed, is_mutated and the tensor methods .numel(), .size(), .dim()"),
        (5, 36, "'._base': guards may not read private or dunder attributes"),
        (6, 36, "the guard reads 'zz', which the pattern does not bind"),
        (8, 44, "this expression is not available in guards"),
    ]
    assert [rule.name for rule in fxrules.parse(GUARDS.splitlines()[6] + "\n")] == ["g"]
