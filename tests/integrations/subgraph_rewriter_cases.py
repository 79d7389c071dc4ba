"""The modules, patterns and replacements of torch's ``replace_pattern`` cases, each defined once.

They are the examples of ``replace_pattern``'s docstring and the cases of torch's
``test/fx/test_subgraph_rewriter.py``, shared by the rule-against-``replace_pattern``
tests (``test_replace_pattern_compat.py``) and the drop-in and conversion tests
(``test_convert.py``).  Patterns and replacements are named functions, not
lambdas: ``replace_pattern`` traces them.  Rules that name an opaque function
reach it through ``use`` of this module.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx

# ---------------------------------------------------------------- functions that stay opaque to tracing
# (torch's test file wraps the same two); rules reach them through `use` of this module


@torch.fx.wrap
def wrapped_gemm_bias_mul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res = torch.nn.functional.linear(a, b, bias=bias)
    mul_res = lin_res * a
    return lin_res, mul_res


@torch.fx.wrap
def wrapped_gemm_bias_mul_with_c(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res = torch.nn.functional.linear(a, b, bias=bias)
    mul_res = lin_res * c
    return lin_res, mul_res


# ---------------------------------------------------------------- patterns, replacements and the modules they match


class LinearMul(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w0 = torch.nn.Parameter(torch.randn([16, 16]))
        self.b0 = torch.nn.Parameter(torch.randn([16]))

    def forward(self, in0: torch.Tensor) -> torch.Tensor:
        lin_res = torch.nn.functional.linear(in0, self.w0, bias=self.b0)
        mul_res = in0 * lin_res
        return mul_res + in0


def linear_mul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res = torch.nn.functional.linear(a, b, bias=bias)
    mul_res = a * lin_res
    return lin_res, mul_res


def wrapped_linear_mul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res, mul_res = wrapped_gemm_bias_mul(a, b, bias)
    return lin_res, mul_res


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


def neg(x: torch.Tensor) -> torch.Tensor:
    return torch.neg(x)


def relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x)


def exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x)


def neg_plus_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.neg(x) + torch.relu(x)


def sigmoid_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.sigmoid(x))


def mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, y)


def reshape_alias(x: torch.Tensor, arg0: list[int], arg1: list[int]) -> torch.Tensor:
    return torch.ops.aten._reshape_alias_copy.default(x, arg0, arg1)


def reshape_alias_swapped(x: torch.Tensor, arg0: list[int], arg1: list[int]) -> torch.Tensor:
    return torch.ops.aten._reshape_alias_copy.default(x, arg1, arg0)


class MmModule(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, y)


class ReshapeAliasModule(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # doubled: returning a view of the input (the replacement's as_strided) would be skipped (reason 'alias')
        return torch.ops.aten._reshape_alias_copy.default(x, [1, 2], [3, 4]) * 2


class CatSumModule(torch.nn.Module):
    """The module of replace_pattern's docstring (and of test_subgraph_rewriter_multiple_pattern_match)."""

    def forward(self, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        m1 = torch.cat([w1, w2]).sum()
        m2 = torch.cat([w1, w2]).sum()
        return x + torch.max(m1) + torch.max(m2)


class NegReluModule(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        val = torch.neg(x) + torch.relu(x)
        return torch.add(val, val)


def cat(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.cat([w1, w2])


def stack(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.stack([w1, w2])


def cat_sum(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.cat([w1, w2]).sum()


def neg_plus_relu_of_two(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.neg(x) + torch.relu(y)


def relu_of_first(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)


class NegReluTwoInputs(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        val = torch.neg(x) + torch.relu(y)
        return torch.add(val, val)


class NegOnce(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        val = torch.neg(x)
        return torch.add(val, val)


class NegAddItself(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.neg(x)
        return torch.add(a, a)


def neg_add_itself(x: torch.Tensor) -> torch.Tensor:
    a = torch.neg(x)
    return torch.add(a, a)


def sigmoid_cat_itself(x: torch.Tensor) -> torch.Tensor:
    a = torch.sigmoid(x)
    return torch.cat([a, a])


class ReluEscapes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        return torch.neg(y) - y


class AddmmOfCats(torch.nn.Module):
    def forward(self, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, b1: torch.Tensor,
                b2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m0 = torch.cat([w1, w2])  # noqa: F841
        m1 = torch.cat([w1, w2])
        m2 = torch.cat([x, b2])
        t0 = torch.addmm(b1, m1, m2.t())  # noqa: F841
        t1 = torch.sum(w1, 1)
        t2 = torch.addmm(b1, m1, m2.t())
        return torch.sum(t1), torch.sum(t2)


def addmm_of_cats(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, b1: torch.Tensor,
                  b2: torch.Tensor) -> torch.Tensor:
    m1 = torch.cat([w1, w2])
    m2 = torch.cat([x, b2])
    return torch.addmm(b1, m1, m2.t())


def cat_three(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, b1: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, w1, w2])


def sigmoids(count: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(count):
            x = torch.sigmoid(x)
        return x

    return chain


def sigmoid_and_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x) + torch.relu(x)


def sigmoid_relu_pair(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.sigmoid(a), torch.relu(a)


def exp_abs_pair(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.exp(x), torch.abs(x)


def difference_outputs(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    x = x1 - x2
    return torch.sigmoid(x) + torch.relu(x)


def three_outputs(a1: torch.Tensor, a2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = a1 - a2
    return torch.sigmoid(a), torch.relu(a), a


def three_replaced(x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y2 = torch.abs(x2)
    return y2, y2, torch.exp(x1)


class AddUnusedZ(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return x + y


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def sub(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x - y


class MethodChain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.dequantize().sigmoid().to(torch.float16) * 2


def method_chain(x: torch.Tensor) -> torch.Tensor:
    return x.dequantize().sigmoid().to(torch.float16)


def as_strided(x: torch.Tensor, arg0: list[int], arg1: list[int]) -> torch.Tensor:
    return torch.ops.aten.as_strided.default(x, arg0, arg1)


class AddThenMethodChain(torch.nn.Module):
    """test_subgraph_rewriter_placeholder_matching: the capture matches the ``add``; the dtype is an attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.dtype = torch.float16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x += 3
        return torch.sigmoid(x.dequantize()).to(self.dtype)


def dequantize_sigmoid_to(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x.dequantize()).to(torch.float16)


class ThreeAnchors(torch.nn.Module):
    """test_subgraph_rewriter_local_revert: three candidate anchors, two matches (the second's operands are
    the other way round)."""

    def __init__(self) -> None:
        super().__init__()
        for i in range(5):
            self.register_parameter(f"w{i}", torch.nn.Parameter(torch.randn([16, 16]) / 4))
            self.register_parameter(f"b{i}", torch.nn.Parameter(torch.randn([16])))

    def forward(self, in0: torch.Tensor, in1: torch.Tensor) -> torch.Tensor:
        linear = torch.nn.functional.linear
        lin_res_2 = linear(linear(in1, self.w0, bias=self.b0), self.w1, bias=self.b1)
        sum_res_1 = in1 * lin_res_2 + in1
        lin_res_3 = linear(sum_res_1, self.w2, bias=self.b2)
        mul_res_2 = lin_res_3 * torch.sigmoid(lin_res_3)
        lin_res_5 = linear(linear(in0, self.w3, bias=self.b3), self.w4, bias=self.b4)
        return torch.cat([mul_res_2, in0 * lin_res_5 + in0], dim=1)


def linear_times_c(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor,
                    c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res = torch.nn.functional.linear(a, b, bias=bias)
    return lin_res, c * lin_res


def wrapped_linear_times_c(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor,
                            c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lin_res, mul_res = wrapped_gemm_bias_mul_with_c(a, b, bias, c)
    return lin_res, mul_res


class NegReluSwapped(torch.nn.Module):
    """``neg(x) + relu(y)`` with the operands of ``+`` the other way round."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(y) + torch.neg(x)


class NegYPlusReluX(torch.nn.Module):
    """test_subgraph_rewriter_correct_output_replacement: ``neg(y) + relu(x)``, only the ``relu`` to replace."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        val = torch.neg(y) + torch.relu(x)
        return torch.add(val, val)


class MinusAttributeC(torch.nn.Module):
    """test_replacement_with_attrs' replacement: ``x - self.c``, the tensor ``c`` an attribute of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.c = torch.tensor([3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.c
