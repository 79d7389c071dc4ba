"""Rewrite-time helpers bundled with fxrules (``@fold_conv_bn(c, bn)`` in a replacement).

A helper is a plain Python function called while a rewrite is built.  It
receives the bound values (modules, literals, tensors of ``Attr`` captures,
and :class:`fxrules.rewrite.rewriter.HelperTensor` views of tensor captures) and
returns an ``nn.Module`` (called through a new submodule), a tensor (a new
buffer read with ``get_attr``) or a Python literal (inlined).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval

from fxrules.rewrite.rewriter import HelperTensor

_BATCH_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
_Sequence = TypeVar("_Sequence", tuple[Any, ...], list[Any])  # concat joins two of the same kind


def _eval_batch_norm(bn: torch.nn.Module, helper: str) -> _BatchNorm:
    """``bn``, once checked to be an eval-mode BatchNorm that tracks running statistics."""
    if not isinstance(bn, _BATCH_NORMS):
        raise TypeError(f"{helper}: expected a BatchNorm module, got {type(bn).__name__}")
    if bn.training:
        raise ValueError(f"{helper}: {type(bn).__name__} is in training mode; only eval-mode BatchNorm folds")
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError(f"{helper}: {type(bn).__name__} tracks no running statistics")
    return bn


def fold_conv_bn(conv: torch.nn.Module, bn: torch.nn.Module) -> torch.nn.Module:
    """A convolution (1d/2d/3d, any groups, with or without bias) with an eval-mode BatchNorm folded in."""
    if not isinstance(conv, torch.nn.Conv1d | torch.nn.Conv2d | torch.nn.Conv3d):
        raise TypeError(f"fold_conv_bn: expected Conv1d/2d/3d, got {type(conv).__name__}")
    batch_norm = _eval_batch_norm(bn, "fold_conv_bn")
    if conv.training:
        raise ValueError("fold_conv_bn: the convolution is in training mode")
    return fuse_conv_bn_eval(conv, batch_norm)


def fold_linear_bn(linear: torch.nn.Module, bn: torch.nn.Module) -> torch.nn.Module:
    """A Linear layer with a following eval-mode BatchNorm1d folded in."""
    if not isinstance(linear, torch.nn.Linear):
        raise TypeError(f"fold_linear_bn: expected Linear, got {type(linear).__name__}")
    batch_norm = _eval_batch_norm(bn, "fold_linear_bn")
    if linear.training:
        raise ValueError("fold_linear_bn: the Linear layer is in training mode")
    if linear.out_features != batch_norm.num_features:
        raise ValueError(f"fold_linear_bn: Linear has {linear.out_features} outputs, BatchNorm "
                         f"{batch_norm.num_features} features")
    return fuse_linear_bn_eval(linear, batch_norm)


def fold_conv_bn_weight(weight: Any, bn_weight: Any, running_var: Any, eps: float) -> torch.Tensor:
    """The weight of a convolution with an eval-mode batch norm folded in (functional and aten spellings)."""
    return _folded_conv_bn(weight, None, bn_weight, None, None, running_var, eps)[0]


def fold_conv_bn_bias(weight: Any, bias: Any, bn_weight: Any, bn_bias: Any, running_mean: Any, running_var: Any,
                      eps: float) -> torch.Tensor:
    """The bias of a convolution with an eval-mode batch norm folded in; ``bias`` may be None."""
    return _folded_conv_bn(weight, bias, bn_weight, bn_bias, running_mean, running_var, eps)[1]


def _folded_conv_bn(weight: Any, bias: Any, bn_weight: Any, bn_bias: Any, running_mean: Any, running_var: Any,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    values = [_known(v) for v in (weight, bias, bn_weight, bn_bias, running_mean, running_var)]
    weight, bias, bn_weight, bn_bias, running_mean, running_var = values
    if running_var is None:
        running_var = torch.ones(weight.shape[0], dtype=weight.dtype)
    if running_mean is None:
        running_mean = torch.zeros_like(running_var)
    with torch.no_grad():
        folded = fuse_conv_bn_weights(weight, bias, running_mean, running_var, eps, bn_weight, bn_bias)
    return folded[0].detach(), folded[1].detach()


def _known(value: Any) -> Any:
    """A tensor argument's value (a tensor capture's, if it is known when rewriting), or None."""
    return value.value if isinstance(value, HelperTensor) else value


def static_shape(x: Any) -> tuple[int, ...]:
    """The shape of a tensor capture as a tuple of ints (guard the rule with ``is_static(x)``)."""
    return tuple(int(size) for size in x.shape)


def static_size(x: Any, dim: int) -> int:
    """One dim of a tensor capture's shape, as an int."""
    return int(x.shape[dim])


def index(sequence: tuple[Any, ...] | list[Any], key: int | slice) -> Any:
    """``sequence[key]`` of a literal tuple or list, computed at rewrite time."""
    return sequence[key]


def concat(first: _Sequence, second: _Sequence) -> _Sequence:
    """``first + second`` of two literal tuples (or two lists), computed at rewrite time."""
    return first + second


BUNDLED: dict[str, Callable[..., Any]] = {
    "fold_conv_bn": fold_conv_bn, "fold_linear_bn": fold_linear_bn, "fold_conv_bn_weight": fold_conv_bn_weight,
    "fold_conv_bn_bias": fold_conv_bn_bias, "static_shape": static_shape,
    "static_size": static_size, "index": index, "concat": concat,
}
