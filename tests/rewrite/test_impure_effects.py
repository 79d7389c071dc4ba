"""A rewrite never removes a matched node's effect (an in-place write, out=) unless the replacement has it too."""

from __future__ import annotations

import operator

import torch
import torch.fx

import fxrules

nn = torch.nn
F = nn.functional


class AddInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.add_(1))


def _apply(module: nn.Module, rule: str) -> tuple[torch.fx.GraphModule, fxrules.Report]:
    gm = torch.fx.symbolic_trace(module)
    return gm, fxrules.apply(gm, fxrules.parse(f"rule r:\n    {rule}\n", "effects.fxr"))


def test_a_write_into_an_input_is_not_removed() -> None:
    gm, report = _apply(AddInPlace(), "torch.relu(x.add_(1)) => torch.relu(x + 1)")
    assert report["r"].skip_counts == {"impure": 1}
    assert ("skipped r x1 (impure): relu: 'add_' writes into 'x', and the replacement, which would remove it, "
            "does not do the same") in str(report)
    x = torch.zeros(3)
    gm(x)
    assert x.tolist() == [1.0, 1.0, 1.0]  # the caller still sees the write


def test_the_same_write_in_the_replacement_lets_the_rewrite_happen() -> None:
    for replacement in ["torch.sigmoid(x.add_(1))", "torch.sigmoid(torch.add(x, 1, out=x))"]:
        gm, report = _apply(AddInPlace(), f"torch.relu(x.add_(1)) => {replacement}")
        assert report.counts() == {"r": 1}, replacement
        x = torch.zeros(3)
        torch.testing.assert_close(gm(x), torch.sigmoid(torch.ones(3)))
        assert x.tolist() == [1.0, 1.0, 1.0]


def test_a_write_into_a_tensor_the_match_made_may_go() -> None:
    class CloneAdd(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x.clone().add_(1))

    gm, report = _apply(CloneAdd(), "torch.relu(x.clone().add_(1)) => torch.relu(x + 1)")
    assert report.counts() == {"r": 1}
    assert [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")] == [
        operator.add, torch.relu]


def test_a_write_into_a_view_of_an_input_is_not_removed() -> None:
    class ViewAdd(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x.view(-1).add_(1))

    _, report = _apply(ViewAdd(), "torch.relu(x.view(-1).add_(1)) => torch.relu(x.view(-1) + 1)")
    assert report["r"].skip_counts == {"impure": 1}


def test_a_random_operation_the_pattern_names_may_be_removed() -> None:
    class Dropout(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.dropout(x, 0.5, True) + 1

    gm, report = _apply(Dropout(), "F.dropout(x, 0.5, True) => x")
    assert report.counts() == {"r": 1}
    torch.testing.assert_close(gm(torch.zeros(3)), torch.ones(3))


@torch.fx.wrap
def record(x: torch.Tensor) -> torch.Tensor:
    return x


torch.fx.node.has_side_effect(record)


def test_a_call_registered_as_side_effecting_is_not_removed_at_any_site() -> None:
    """A function torch's registry marks side-effecting keeps its calls, at every site of the graph alike."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return record(x.relu()) + record(x.neg())
    gm = torch.fx.symbolic_trace(f)
    rules = fxrules.parse(f"rule drop:\n    {__name__}.record(x) => x\n", "effects.fxr", allow=[__name__])
    report = fxrules.apply(gm, rules)
    assert report["drop"].skip_counts == {"impure": 2}
    assert gm.code.count("record(") == 2
