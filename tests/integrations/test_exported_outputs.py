"""What a rewritten ``ExportedProgram`` says it returns: each user output names the value the graph returns
now, a node or, where a rule replaced a returned tensor by a literal, that constant (as ``apply`` on a traced
module returns it)."""

from __future__ import annotations

import io

import pytest
import torch
from torch.export.graph_signature import ConstantArgument, OutputKind, TensorArgument

import fxrules


class ScaledAndRectified(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 0, torch.relu(torch.relu(x))


RULES = """
rule mul_zero:
    aten.mul.Tensor(x, 0) => {literal}

rule relu_twice:
    aten.relu.default(aten.relu.default(x)) => aten.relu.default(x)
"""


@pytest.mark.parametrize(("literal", "value"), [("0", 0), ("1.5", 1.5), ("True", True)])
def test_a_returned_tensor_replaced_by_a_literal_is_returned_as_that_constant(literal: str, value: object) -> None:
    program = torch.export.export(ScaledAndRectified(), (torch.randn(3),))
    x = torch.tensor([-1.0, 0.5, 2.0])

    report = fxrules.apply_program(program, fxrules.parse(RULES.format(literal=literal))).report
    rewritten = fxrules.apply(program, fxrules.parse(RULES.format(literal=literal)))

    assert report.counts() == {"mul_zero": 1, "relu_twice": 1}
    first, second = rewritten.graph_signature.output_specs
    assert first.kind is OutputKind.USER_OUTPUT
    assert first.arg == ConstantArgument(name="mul", value=value)
    returned = rewritten.graph_module.graph.output_node().args[0]
    assert second.arg == TensorArgument(name=returned[1].name)
    assert returned[1].target is torch.ops.aten.relu.default
    saved = io.BytesIO()  # a valid program: it is saved, loaded and run as it was made
    torch.export.save(rewritten, saved)
    saved.seek(0)
    for module in (rewritten.module(), torch.export.load(saved).module()):
        constant, rectified = module(x)
        assert constant == value and type(constant) is type(value)
        torch.testing.assert_close(rectified, torch.relu(x))


def test_the_program_given_is_left_as_it_was() -> None:
    """Rewriting a program whose output becomes a constant changes neither its graph nor its signature."""
    program = torch.export.export(ScaledAndRectified(), (torch.randn(3),))
    code, specs = program.graph_module.code, list(program.graph_signature.output_specs)

    fxrules.apply(program, fxrules.parse(RULES.format(literal="0")))

    assert program.graph_module.code == code
    assert list(program.graph_signature.output_specs) == specs


def test_a_constant_output_of_a_program_with_a_dynamic_size_runs_at_other_sizes() -> None:
    """An integer program exported with a dynamic dim keeps its dim, and its constant output, at every size."""
    program = torch.export.export(ScaledAndRectified(), (torch.arange(4),),
                                  dynamic_shapes=({0: torch.export.Dim("n")},))

    rewritten = fxrules.apply(program, fxrules.parse(RULES.format(literal="0")))

    assert rewritten.graph_signature.output_specs[0].arg == ConstantArgument(name="mul", value=0)
    for size in (2, 7):
        x = torch.arange(size) - 3
        constant, rectified = rewritten.module()(x)
        assert constant == 0
        assert torch.equal(rectified, torch.relu(x))
