"""Differential property: random programs mixing identities the bundled and test rules remove, views, and in-place
writes of every kind the rewriter must see (a method's trailing underscore, ``__setitem__``, ``inplace=True``,
``out=`` and ``out=`` tuples, ``copy_``, ``index_put_``, aten overloads, ``_foreach_*_`` lists, a training batch
norm's running statistics, writes through views of views).  After ``apply`` the program shows the outputs, the inputs
after the call, and what a caller's write into the outputs reaches, exactly as before; the ``Incremental`` and
``VisitEverything`` schedulers produce the same code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fxrules
from fxrules.engine.scheduler import Incremental, VisitEverything
from tests.conftest import slow_examples
from tests.side_effects import assert_same, assert_same_state, observe

F = torch.nn.functional

IDENTITIES = fxrules.parse("""
rule same: mul(x, 1.0) => x
rule plus_zero: add(x, 0.0) => x
rule neg_neg: neg(neg(x)) => x
rule t_t: x.t().t() => x
rule contiguous: x.contiguous() => x
rule relu_twice: relu(relu(x)) => relu(x)
""")
RULES = [IDENTITIES, "algebra.fxr", "cleanup.fxr"]

Op = Callable[[Any], Any]

#: Each makes a new 4x4 value from one; most are identities some rule removes, making their result an alias.
PRODUCE: dict[str, Op] = {
    "mul one": lambda v: v * 1.0, "add zero": lambda v: v + 0.0, "neg neg": lambda v: torch.neg(torch.neg(v)),
    "t t": lambda v: v.t().t(), "contiguous": lambda v: v.contiguous(), "relu relu": lambda v: v.relu().relu(),
    "t": lambda v: v.t(), "view": lambda v: v.view(4, 4), "sin": lambda v: v.sin(), "clone": lambda v: v.clone(),
    "torch.clone": lambda v: torch.clone(v), "reshape chain": lambda v: v.reshape(16).reshape(4, 4),
    "dropout eval": lambda v: F.dropout(v, 0.5, False), "float": lambda v: v.float(),
    "to dtype": lambda v: v.to(torch.float32), "sub zero": lambda v: v - 0.0, "div one": lambda v: v / 1.0,
    "halves": lambda v: torch.cat([v[0:2], v[2:4]]), "relu": lambda v: v.relu(), "neg": lambda v: torch.neg(v),
}

#: Each writes into a 4x4 value in place, directly or through views.
WRITE: dict[str, Op] = {
    "add_": lambda v: v.add_(1.0), "zero_ slice": lambda v: v[0:1].zero_(), "mul_ t": lambda v: v.t().mul_(2.0),
    "setitem": lambda v: v.__setitem__((slice(0, 1),), 3.0), "relu inplace": lambda v: F.relu(v, inplace=True),
    "out=": lambda v: torch.add(torch.ones(4, 4), 2.0, out=v), "copy_": lambda v: v.copy_(torch.full((4, 4), 5.0)),
    "batch norm statistics": lambda v: F.batch_norm(torch.arange(8.0).reshape(2, 4), v[0], v[1], training=True,
                                                    momentum=0.5),
    "foreach": lambda v: torch._foreach_mul_([v], 3.0),
    "out= tuple": lambda v: torch.max(torch.arange(16.0).reshape(4, 4), 0,
                                      out=(v[0], torch.zeros(4, dtype=torch.long))),
    "index_put_": lambda v: v.index_put_((torch.tensor([1]),), torch.tensor(7.0)),
    "aten add_": lambda v: torch.ops.aten.add_.Tensor(v, 2.0), "sigmoid_": lambda v: torch.sigmoid_(v),
    "view of views": lambda v: v.t()[0:2].unsqueeze(0).add_(1.0), "flat view": lambda v: v.reshape(-1).mul_(-1.0),
    "setitem of t": lambda v: v.t().__setitem__((0,), 9.0), "detach": lambda v: v.detach().zero_(),
    "split": lambda v: v.split(2)[1].fill_(4.0),
}

# (kind, operation, which earlier value counting back from the last, the other operand of `add`)
STEPS = st.one_of(st.tuples(st.just("produce"), st.sampled_from(sorted(PRODUCE)), st.integers(0, 3)),
                  st.tuples(st.just("write"), st.sampled_from(sorted(WRITE)), st.integers(0, 3)))


def _program(steps: list[tuple[str, str, int]], outputs: int, copied: bool) -> Callable[..., Any]:
    def program(a: Any, b: Any) -> tuple[Any, ...]:
        values = [a, b]
        for kind, name, back in steps:
            value = values[-1 - back % len(values)]
            if kind == "produce":
                values.append(PRODUCE[name](value))
            else:
                WRITE[name](value)
        returned = values[-outputs:]
        return tuple(v * 2.0 for v in returned) if copied else tuple(returned)
    return program


def _inputs() -> list[torch.Tensor]:
    return [torch.randn(4, 4, generator=torch.Generator().manual_seed(seed)) for seed in (1, 2)]


@pytest.mark.slow
@settings(max_examples=slow_examples(150), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(STEPS, min_size=1, max_size=12), st.integers(1, 3), st.booleans(), st.booleans())
def test_apply_keeps_what_programs_with_in_place_writes_compute(steps: list[tuple[str, str, int]], outputs: int,
                                                                copied: bool, with_metadata: bool) -> None:
    program = _program(steps, outputs, copied)
    original = torch.fx.symbolic_trace(program)
    try:
        original(*_inputs())
    except RuntimeError:  # a view the strides do not allow, a shape out= cannot take: no program to compare
        return
    expected = observe(original, _inputs())
    codes = []
    for scheduler in (Incremental, VisitEverything):
        rewritten = torch.fx.symbolic_trace(program)
        fxrules.apply(rewritten, RULES, scheduler=scheduler, example_inputs=_inputs() if with_metadata else None)
        actual = observe(rewritten, _inputs())
        assert_same(actual.outputs, expected.outputs, f"{scheduler.__name__}: outputs")
        assert_same_state(actual.after_call, expected.after_call, f"{scheduler.__name__}: after the call:", 0.0)
        assert_same_state(actual.after_write, expected.after_write, f"{scheduler.__name__}: after a write:", 0.0)
        codes.append(rewritten.code)
    assert codes[0] == codes[1]
