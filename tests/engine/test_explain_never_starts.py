"""explain=True says why a rule can never start a match in the graph it was applied to."""

from __future__ import annotations

import warnings

import torch
import torch.fx

import fxrules

nn = torch.nn

RULES = """\
rule torch_level: torch.relu(x) => torch.sigmoid(x)
rule module_typed:
    given:
        l: nn.Linear
    pattern:
        return l(x)
    replace:
        return F.linear(x, l.weight, l.bias)
rule typed:
    given:
        x: Tensor[N, C]
    pattern:
        return torch.relu(x)
    replace:
        return torch.sigmoid(x)
rule aten_sin: aten.sin.default(x) => aten.cos.default(x)
"""


class LinearRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l(x))


def _rules() -> fxrules.RuleSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fxrules.FxrLoopWarning)
        return fxrules.parse(RULES, "never.fxr")


def _never(report: fxrules.Report) -> dict[str, str]:
    return {rule.name: rule.never_starts for rule in report.rules if rule.never_starts}


def test_explain_names_the_level_and_a_spelling_that_occurs_in_an_aten_level_graph() -> None:
    gm = torch.export.export(LinearRelu(), (torch.randn(2, 4),)).module()
    report = fxrules.apply(gm, _rules(), explain=True)
    assert _never(report) == {
        "torch_level": "its first operation (torch.relu) does not occur in this aten-level graph; the family "
                       "relu(...) also matches the aten.relu.default it has",
        "module_typed": "its pattern starts at a call of a nn.Linear submodule, and this graph has no call_module "
                        "nodes (Dynamo and torch.export inline submodules); an aten-level graph calls aten "
                        "operators only: write the aten operator or a family with one",
        "typed": "its first operation (torch.relu) does not occur in this aten-level graph; the family relu(...) "
                 "also matches the aten.relu.default it has",
        "aten_sin": "its first operation (aten.sin.default) does not occur in this aten-level graph",
    }
    assert "  never starts module_typed: its pattern starts at a call of a nn.Linear submodule" in str(report)


def test_explain_names_missing_metadata_for_typed_captures_in_a_traced_graph() -> None:
    gm = torch.fx.symbolic_trace(LinearRelu())
    report = fxrules.apply(gm, _rules(), explain=True)
    assert _never(report) == {
        "typed": "its captures x are typed Tensor[...] and this graph has no shape metadata, so every match is "
                 "skipped (missing metadata); pass example_inputs= to apply, or trace with torch.export or Dynamo",
        "aten_sin": "its first operation (aten.sin.default) does not occur in this torch-level graph; a "
                    "torch-level graph calls torch functions, methods and modules: write one, or a family",
    }


def test_an_overload_packet_is_suggested_when_the_graph_has_another_overload() -> None:
    class Sum(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum()

    gm = torch.export.export(Sum(), (torch.randn(3),)).module()
    rules = fxrules.parse("rule r: aten.sum.dim_IntList(x, [0]) => aten.mean.dim(x, [0])\n", "packet.fxr")
    report = fxrules.apply(gm, rules, explain=True)
    assert report["r"].never_starts == (
        "its first operation (aten.sum.dim_IntList) does not occur in this aten-level graph; the family sum(...) "
        "also matches the aten.sum.default it has")


def test_without_explain_nothing_is_computed_or_shown() -> None:
    gm = torch.fx.symbolic_trace(LinearRelu())
    report = fxrules.apply(gm, _rules())
    assert _never(report) == {} and "never starts" not in str(report)
    assert report.to_dict()["rules"][0]["never_starts"] == ""
