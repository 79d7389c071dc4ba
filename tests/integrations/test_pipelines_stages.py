"""Edge cases of the compile pipelines (issue 7): exported programs, the torch.compile backend, the Inductor pass.

Tests marked ``xfail(strict=True)`` pin genuine fxrules bugs: each one states the behaviour a user would
expect and fails today for the reason given; when the bug is fixed the mark must go.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._inductor.config
import torch.fx
from torch._inductor.exc import InductorError
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

import fxrules
from fxrules.graph.subgraphs import NO_NEW_TENSORS
from fxrules.integrations.pipelines import FxrCompileError
from tests.integrations.pipeline_helpers import WithLinear, assert_inductor_computes_as_eager, round_trip

nn = torch.nn

TOLERANCE: dict[str, float] = {"atol": 1e-5, "rtol": 1e-4}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _inputs(program: ExportedProgram) -> list[tuple[str, str | None, bool | None]]:
    """The input signature as (kind, target, persistent)."""
    return [(spec.kind.name, spec.target, spec.persistent) for spec in program.graph_signature.input_specs]


def _outputs(program: ExportedProgram) -> list[tuple[str, str | None]]:
    return [(spec.kind.name, spec.target) for spec in program.graph_signature.output_specs]


def _calls(program: ExportedProgram) -> list[str]:
    return [str(n.target) for n in program.graph.nodes if n.op == "call_function"]


def _scaled_batch_norm(bn: nn.BatchNorm2d) -> None:
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2.0)


class ConvBN(nn.Module):
    def __init__(self, bias: bool = False, affine: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(4, affine=affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.relu(self.bn(self.conv(x))))


def _conv_bn(bias: bool = False, affine: bool = True) -> ConvBN:
    torch.manual_seed(0)
    model = ConvBN(bias, affine)
    _scaled_batch_norm(model.bn)
    return model.eval()


# ---------------------------------------------------------------- ExportedProgram: signatures and state


def test_dynamic_batch_dim_survives_a_fold_and_around_trip() -> None:
    model, x = _conv_bn(), torch.randn(2, 3, 8, 8)
    batch = torch.export.Dim("batch", min=1, max=16)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    result = fxrules.apply_program(program, ["algebra.fxr", "fusions.fxr"])
    assert result.report.counts() == {"relu_idempotent": 1, "fold_conv2d_bn_functional": 1}
    rewritten = result.program
    assert [str(r) for r in rewritten.range_constraints.values()] == ["VR[1, 16]"]
    bigger = torch.randn(5, 3, 8, 8)
    for candidate in (rewritten, round_trip(rewritten)):
        torch.testing.assert_close(candidate.module()(bigger), model(bigger), **TOLERANCE)
    with pytest.raises(AssertionError):  # the range is still checked
        rewritten.module()(torch.randn(17, 3, 8, 8))


def test_non_persistent_buffers_and_lifted_constants_keep_their_kinds() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scale", torch.randn(4), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.neg(torch.neg(x * self.scale + torch.tensor([1.0, 2.0, 3.0, 4.0]))) + -0.0

    model, x = Scaled(), torch.randn(4)
    program = torch.export.export(model, (x,))
    result = fxrules.apply_program(program, "algebra.fxr")
    assert result.report.counts() == {"double_neg": 1, "add_negative_zero": 1}
    rewritten = result.program
    assert _inputs(rewritten) == _inputs(program) == [
        ("BUFFER", "scale", False), ("CONSTANT_TENSOR", "lifted_tensor_0", None), ("USER_INPUT", None, None)]
    assert list(rewritten.state_dict) == []
    assert sorted(rewritten.constants) == ["lifted_tensor_0", "scale"]
    for candidate in (rewritten, round_trip(rewritten)):
        torch.testing.assert_close(candidate.module()(x), model(x))


class Counter(nn.Module):
    """A buffer mutated in place in forward: non-functional export IR keeps the ``add_``, with no output spec."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)  # its result is unused: must not be dead-code eliminated
        self.count.add_(1)
        return torch.neg(torch.neg(x)) * self.count * 1


@pytest.mark.parametrize("decomposed", [False, True], ids=["inplace", "functional"])
def test_buffers_mutated_in_forward_stay_mutated(decomposed: bool) -> None:
    x = torch.randn(4)
    program = torch.export.export(Counter(), (x,))
    if decomposed:
        program = program.run_decompositions()
    result = fxrules.apply_program(program, "algebra.fxr")
    assert result.report.counts() == {"double_neg": 1, "mul_one": 1}
    assert _outputs(result.program) == _outputs(program)
    loaded = round_trip(result.program)  # before anything runs: modules share the program's buffers
    for candidate in (result.program, loaded):
        module, reference = candidate.module(), Counter()
        for _ in range(3):
            torch.testing.assert_close(module(x), reference(x))
        assert (float(module.count), float(module.calls)) == (float(reference.count), float(reference.calls)) == (3, 3)


@pytest.mark.parametrize("decomposed", [False, True], ids=["inplace", "functional"])
def test_batch_norm_in_train_mode_still_updates_its_running_stats(decomposed: bool) -> None:
    torch.manual_seed(0)
    model, x = ConvBN(bias=True).train(), torch.randn(2, 3, 8, 8)
    program = torch.export.export(copy.deepcopy(model), (x,))
    if decomposed:
        program = program.run_decompositions()
    result = fxrules.apply_program(program, ["algebra.fxr", "fusions.fxr"])
    assert result.report.counts() == {"relu_idempotent": 1}  # no fold in train mode
    assert _outputs(result.program) == _outputs(program)
    loaded = round_trip(result.program)
    for candidate in (result.program, loaded):
        module, reference = candidate.module(), copy.deepcopy(model)
        for _ in range(2):
            torch.testing.assert_close(module(x), reference(x))
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            torch.testing.assert_close(getattr(module.bn, name), getattr(reference.bn, name))


def test_pytree_outputs_and_keyword_inputs() -> None:
    class Tree(nn.Module):
        def forward(self, x: torch.Tensor, *, y: torch.Tensor) -> dict[str, Any]:
            return {"a": torch.neg(torch.neg(x)), "b": (y + 0, x * 1, y * 2)}

    x, y = torch.randn(3), torch.randn(3)
    program = torch.export.export(Tree(), (x,), kwargs={"y": y})
    result = fxrules.apply_program(program, "algebra.fxr")
    # each rewrite would make an output the input itself: a caller writing into it would change the input
    assert result.report.counts() == {}
    assert {rule: dict(result.report[rule].skip_counts) for rule in ("double_neg", "mul_one")} == {
        "double_neg": {"alias": 1}, "mul_one": {"alias": 1}}
    assert _outputs(result.program) == [("USER_OUTPUT", None)] * 4
    expected = Tree()(x, y=y)
    for candidate in (result.program, round_trip(result.program)):
        assert candidate.call_spec.out_spec == program.call_spec.out_spec
        torch.testing.assert_close(candidate.module()(x, y=y), expected)


def test_outputs_that_become_lifted_inputs() -> None:
    class Returns(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4))
            self.register_buffer("b", torch.randn(4))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return x + self.w, self.w * 1, self.b + 0, torch.neg(torch.neg(torch.tensor([1.0, 2.0])))

    model, x = Returns(), torch.randn(4)
    program = torch.export.export(model, (x,))
    result = fxrules.apply_program(program, "algebra.fxr")
    # each rewrite would return a parameter, buffer or constant: a caller writing into it would change the module
    # (the lifted constant is copied, then written in place by export's own code: 'in-place write')
    assert result.report.counts() == {}
    assert {rule: dict(result.report[rule].skip_counts) for rule in ("double_neg", "mul_one")} == {
        "double_neg": {"in-place write": 1}, "mul_one": {"alias": 1}}
    assert _inputs(result.program) == _inputs(program)
    for candidate in (result.program, round_trip(result.program)):
        torch.testing.assert_close(candidate.module()(x), model(x))


def test_a_program_where_nothing_fires_is_returned_as_it_is() -> None:
    program = torch.export.export(nn.Sigmoid(), (torch.randn(3),))
    assert fxrules.apply(program, ["algebra.fxr", "fusions.fxr", "cleanup.fxr"]) is program
    softsign = fxrules.parse("rule odd:\n    sigmoid(x) => torch.nn.functional.softsign(x)\n")
    result = fxrules.apply_program(program, softsign)
    assert result.report["odd"].skip_counts == {"no aten spelling": 1}
    assert result.program is program


def test_a_helper_tensor_bound_once_and_read_twice_is_one_buffer_per_site() -> None:
    class Two(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) + torch.relu(x * 3)

    rules = fxrules.parse("rule r:\n    pattern:\n        return relu(x)\n    replace:\n"
                          "        t = @twos(x)\n        return x * t + t\n", "twice.fxr")
    x = torch.randn(2, 4)
    program = torch.export.export(Two(), (x,))
    result = fxrules.apply_program(program, rules, helpers={"twos": lambda x: torch.full((4,), 2.0)})
    assert result.report.counts() == {"r": 2}
    assert _inputs(result.program) == [("BUFFER", "twos", True), ("BUFFER", "twos_1", True), ("USER_INPUT", None, None)]
    buffers = [n for n in result.program.graph.find_nodes(op="placeholder") if n.name.startswith("b_twos")]
    assert [len(n.users) for n in buffers] == [2, 2]
    expected = (x * 2 + 2) + (x * 3 * 2 + 2)
    for candidate in (result.program, round_trip(result.program)):
        torch.testing.assert_close(candidate.module()(x), expected)


def test_conv_with_a_bias_folds_into_its_batch_norm() -> None:
    model, x = _conv_bn(bias=True), torch.randn(2, 3, 8, 8)
    result = fxrules.apply_program(torch.export.export(model, (x,)), "fusions.fxr")
    assert result.report.counts() == {"fold_conv2d_bn_functional": 1}
    assert sorted(result.program.state_dict) == ["bn.num_batches_tracked", "fold_conv_bn_bias", "fold_conv_bn_weight"]
    assert "aten.batch_norm.default" not in _calls(result.program)
    for candidate in (result.program, round_trip(result.program)):
        torch.testing.assert_close(candidate.module()(x), model(x), **TOLERANCE)


@pytest.mark.parametrize("bias", [False, True])
def test_batch_norm_without_affine_folds_in_an_exported_program(bias: bool) -> None:
    model, x = _conv_bn(bias=bias, affine=False), torch.randn(2, 3, 8, 8)
    traced = torch.fx.symbolic_trace(copy.deepcopy(model))
    assert fxrules.apply(traced, "fusions.fxr").fired("fold_conv2d_bn") == 1  # the module form folds
    result = fxrules.apply_program(torch.export.export(model, (x,)), "fusions.fxr")
    assert "aten.batch_norm.default" not in _calls(result.program), str(result.report)
    torch.testing.assert_close(result.program.module()(x), model(x), **TOLERANCE)


def test_module_then_apply_then_export_again() -> None:
    model, x = _conv_bn(), torch.randn(2, 3, 8, 8)
    gm = torch.export.export(model, (x,)).module()
    report = fxrules.apply(gm, ["fusions.fxr", "algebra.fxr"])
    assert report.counts() == {"fold_conv2d_bn_functional": 1, "relu_idempotent": 1}
    again = torch.export.export(gm, (x,))
    assert "aten.batch_norm.default" not in _calls(again)
    assert {"fold_conv_bn_weight", "fold_conv_bn_bias"} <= set(again.state_dict)
    for candidate in (gm, again.module(), round_trip(again).module()):
        torch.testing.assert_close(candidate(x), model(x), **TOLERANCE)


def test_run_decompositions_after_rewriting() -> None:
    model, x = _conv_bn(), torch.randn(2, 3, 8, 8)
    rewritten = fxrules.apply(torch.export.export(model, (x,)), ["fusions.fxr", "algebra.fxr"])
    decomposed = rewritten.run_decompositions()
    assert sorted(_inputs(decomposed), key=str) == sorted(_inputs(rewritten), key=str)  # reordered, same set
    assert "aten.convolution.default" in _calls(decomposed)
    for candidate in (decomposed, round_trip(decomposed)):
        torch.testing.assert_close(candidate.module()(x), model(x), **TOLERANCE)


def test_apply_program_helper_error_names_the_rule_and_leaves_the_program_alone() -> None:
    def broken(x: Any) -> Any:
        raise ValueError("no fold today")

    program = torch.export.export(nn.ReLU(), (torch.randn(3),))
    code, signature = program.graph_module.code, str(program.graph_signature)
    rules = fxrules.parse("rule boom:\n    relu(x) => torch.neg(@broken(x))\n", "broken.fxr")
    with pytest.raises(fxrules.FxrApplyError) as caught:
        fxrules.apply_program(program, rules, helpers={"broken": broken})
    assert str(caught.value) == "broken.fxr:1:6: rule boom failed at node 'relu': ValueError: no fold today"
    assert (program.graph_module.code, str(program.graph_signature)) == (code, signature)


def test_fold_inside_a_no_grad_region_is_skipped_with_a_reason() -> None:
    class Region(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = _conv_bn()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                y = self.inner.bn(self.inner.conv(x))
            return torch.neg(torch.neg(y))

    model, x = Region().eval(), torch.randn(2, 3, 8, 8)
    result = fxrules.apply_program(torch.export.export(model, (x,)), ["fusions.fxr", "algebra.fxr"])
    assert result.report.counts() == {"double_neg": 1}
    assert result.report["fold_conv2d_bn_functional"].skip_counts == {"value unknown": 1}
    for candidate in (result.program, round_trip(result.program)):
        torch.testing.assert_close(candidate.module()(x), model(x))


# ---------------------------------------------------------------- ExportedProgram: known bugs


class Scale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.relu(x))


def test_two_rule_files_applied_one_after_the_other_with_the_same_helper() -> None:
    helpers = {"scale": lambda x: torch.full((4,), 2.0)}
    x = torch.randn(2, 4)
    program = torch.export.export(Scale(), (x,))
    first = fxrules.apply(program, fxrules.parse("rule a:\n    relu(x) => x * @scale(x)\n", "a.fxr"), helpers=helpers)
    second = fxrules.apply(first, fxrules.parse("rule b:\n    neg(x) => x * @scale(x)\n", "b.fxr"), helpers=helpers)
    assert len(second.state_dict) == 2
    torch.testing.assert_close(round_trip(second).module()(x), x * 4)


def test_a_helper_named_like_an_existing_buffer() -> None:
    class Buffered(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scale", torch.full((4,), 5.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) + self.scale

    x = torch.randn(2, 4)
    program = torch.export.export(Buffered(), (x,))
    rewritten = fxrules.apply(program, fxrules.parse("rule a:\n    relu(x) => x * @scale(x)\n", "a.fxr"),
                              helpers={"scale": lambda x: torch.full((4,), 2.0)})
    torch.testing.assert_close(rewritten.state_dict["scale"], torch.full((4,), 5.0))
    torch.testing.assert_close(round_trip(rewritten).module()(x), x * 2 + 5)


class Named(nn.Module):
    def forward(self, input: torch.Tensor, list: torch.Tensor) -> torch.Tensor:
        return torch.neg(torch.neg(input)) + list


def test_user_inputs_named_like_builtins_keep_their_names() -> None:
    a, b = torch.randn(3), torch.randn(3)
    program = torch.export.export(Named(), (a, b))
    rewritten = fxrules.apply(program, "algebra.fxr")
    torch.testing.assert_close(rewritten.module()(a, b), a + b)  # it runs ...
    assert rewritten.graph_signature.user_inputs == program.graph_signature.user_inputs == ("input", "list")


def test_a_functional_program_that_mutates_an_input_named_input() -> None:
    """The mutation spec names the input ``input``; the rewritten program keeps that name, so it still agrees.

    (Running it is not tested: torch 2.13's own ``module()`` of such a program, rewritten or not, fails with
    "Could not find input in either buffer or input nodes", because its copy renames the placeholder.)
    """

    class Mutates(nn.Module):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            input.add_(1)
            return torch.neg(torch.neg(input)) * 2

    x = torch.randn(3)
    program = torch.export.export(Mutates(), (x.clone(),)).run_decompositions()
    assert [spec.kind for spec in program.graph_signature.output_specs] == [OutputKind.USER_INPUT_MUTATION,
                                                                            OutputKind.USER_OUTPUT]
    result = fxrules.apply_program(program, "algebra.fxr")
    assert result.report.counts() == {"double_neg": 1}
    signature = result.program.graph_signature
    assert signature.user_inputs == ("input",)
    assert signature.user_inputs_to_mutate == program.graph_signature.user_inputs_to_mutate
    assert [n.name for n in result.program.graph.find_nodes(op="placeholder")] == ["input"]


def test_a_helper_tensor_inside_a_no_grad_region_is_skipped_with_a_reason() -> None:
    """An exported program takes tensors only as inputs of its root graph, so a subgraph cannot get one."""

    class Region(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                y = torch.relu(x)
            return y + 1

    x = torch.randn(2, 4)
    program = torch.export.export(Region(), (x,))
    result = fxrules.apply_program(program, fxrules.parse("rule r:\n    relu(x) => x * @twos(x)\n", "r.fxr"),
                                   helpers={"twos": lambda x: torch.full((4,), 2.0)})
    assert result.report.fired("r") == 0 and result.program is program
    assert result.report["r"].skip_counts == {"no new tensors": 1}
    assert ("submod_1.relu: helper '@twos' returned a tensor, but 'submod_1' is the subgraph of a higher-order "
            "operator, and an exported program takes tensors only as inputs of its root graph") in str(result.report)
    assert NO_NEW_TENSORS not in program.graph_module.submod_1.meta  # only the copy was marked


# ---------------------------------------------------------------- torch.compile backend


class Block(WithLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.relu(self.linear(x))) * 1


def test_backend_with_dynamic_true_compiles_once_for_every_batch() -> None:
    model = Block().eval()
    backend = fxrules.backend("algebra.fxr", then="eager")
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch in (3, 5, 7):
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert [report.counts() for report in backend.reports] == [{"relu_idempotent": 1, "mul_one": 1}]


def test_backend_reports_each_recompilation() -> None:
    model = Block().eval()
    backend = fxrules.backend("algebra.fxr", then="eager")
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for batch in (3, 5, 7):  # static, then automatic dynamic: two graphs
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert [report.counts() for report in backend.reports] == [{"relu_idempotent": 1, "mul_one": 1}] * 2
    assert repr(backend) == "fxrules.backend(rulesets/algebra.fxr, 2 graphs compiled)"


def test_backend_on_a_model_without_rewrite_sites() -> None:
    backend = fxrules.backend(["algebra.fxr", "fusions.fxr"], then="eager")
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh()).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend=backend)(x), model(x))
    (report,) = backend.reports
    assert report.counts() == {} and report.total_fired == 0


BROKEN = "rule boom:\n    relu(x) => torch.neg(@broken(x))\n"


def _broken(x: Any) -> Any:
    raise ValueError("no fold today")


def test_a_load_error_fails_when_the_backend_is_built_and_a_helper_error_when_compiling(tmp_path: Path) -> None:
    path = tmp_path / "bad.fxr"
    path.write_text("rule bad:\n    torch.reluu(x) => x\n")
    for build in (fxrules.backend, fxrules.inductor_pass):
        with pytest.raises(fxrules.FxrLoadError) as caught:
            build(path)
        assert str(caught.value).splitlines()[0] == f"{path}:2:11: error: unknown target 'torch.reluu'"
    backend = fxrules.backend(fxrules.parse(BROKEN, "broken.fxr"), then="eager", helpers={"broken": _broken})
    x = torch.randn(4)
    with pytest.raises(FxrCompileError) as failed:
        torch.compile(lambda x: torch.relu(x) + 1, backend=backend)(x)
    assert str(failed.value).splitlines()[0] == "broken.fxr:1:6: rule boom failed at node 'relu': " \
                                                "ValueError: no fold today"
    assert backend.reports == []


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "unknown helper '@broken'"),
    ({"helpers": {"broken": _broken}, "max_passes": 0}, "max_passes must be at least 1"),
    ({"helpers": {"broken": _broken}, "max_pases": 3}, "got an unexpected keyword argument 'max_pases'"),
], ids=["missing-helper", "max-passes-0", "misspelt-keyword"])
@pytest.mark.parametrize("build", [fxrules.backend, fxrules.inductor_pass], ids=["backend", "inductor_pass"])
def test_apply_arguments_are_checked_when_the_stage_is_built(build: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(fxrules.FxrError, match=message):
        build(fxrules.parse(BROKEN, "broken.fxr"), **kwargs)


# ---------------------------------------------------------------- Inductor custom pass


BOOM_MESSAGE = "broken.fxr:1:6: rule boom failed at node 'relu': ValueError: no fold today"


def _compile_with_broken_pass(expected: type[BaseException], **config: Any) -> BaseException:
    """What ``torch.compile`` raises when BROKEN's pass runs where ``config`` puts it."""
    graph_pass = fxrules.inductor_pass(fxrules.parse(BROKEN, "broken.fxr"), helpers={"broken": _broken})
    patch = {name: graph_pass if value == "pass" else value for name, value in config.items()}
    with torch._inductor.config.patch(**patch), pytest.raises(expected) as failed:
        torch.compile(lambda x: torch.relu(x) + 1)(torch.randn(4))
    return failed.value


def test_a_pre_grad_pass_error_is_an_fxr_error() -> None:
    error = _compile_with_broken_pass(FxrCompileError, pre_grad_custom_pass="pass", fx_graph_cache=False)
    assert str(error).splitlines()[0] == BOOM_MESSAGE


def test_a_post_grad_pass_error_is_an_fxr_error() -> None:
    error = _compile_with_broken_pass(fxrules.FxrError, post_grad_custom_post_pass="pass")
    assert str(error).splitlines()[0] == BOOM_MESSAGE


def test_without_the_fx_graph_cache_inductor_wraps_a_post_grad_pass_error() -> None:
    """That code path of Inductor wraps every exception; the FxrError is its inner_exception (docs/pipelines.md)."""
    error = _compile_with_broken_pass(InductorError, post_grad_custom_post_pass="pass", fx_graph_cache=False)
    assert isinstance(error, InductorError) and isinstance(error.inner_exception, FxrCompileError)
    assert str(error).splitlines()[0] == f"FxrCompileError: {BOOM_MESSAGE}"


UUID_SCRIPT = """
import functools, json, torch, fxrules

def mul(x, k):
    return x * k

print(json.dumps({
    "files": fxrules.inductor_pass(["algebra.fxr", "fusions.fxr"]).uuid(),
    "function": fxrules.inductor_pass("algebra.fxr", helpers={"mul": mul}).uuid(),
    "partial": fxrules.inductor_pass("algebra.fxr", helpers={"mul": functools.partial(mul, k=2)}).uuid(),
}))
"""


@pytest.fixture(scope="module")
def uuids_of_two_processes() -> list[dict[str, str]]:
    """The uuids two fresh Python processes compute for the same rules and helpers (run side by side)."""
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    processes = [subprocess.Popen([sys.executable, "-c", UUID_SCRIPT], stdout=subprocess.PIPE, text=True, env=env)
                 for _ in range(2)]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0]
    return [json.loads(output.strip().splitlines()[-1]) for output in outputs]


@pytest.mark.parametrize("key", ["files", "function"])
def test_inductor_pass_uuid_is_the_same_in_another_process(uuids_of_two_processes: list[dict[str, str]],
                                                           key: str) -> None:
    first, second = uuids_of_two_processes
    assert first[key] == second[key]
    assert first["files"] != first["function"]


def test_inductor_pass_uuid_of_a_partial_helper_is_the_same_in_another_process(
        uuids_of_two_processes: list[dict[str, str]]) -> None:
    first, second = uuids_of_two_processes
    assert first["partial"] == second["partial"]


def _times_two(x: Any) -> torch.Tensor:
    return torch.full((4,), 2.0)


def _times_three(x: Any) -> torch.Tensor:
    return torch.full((4,), 3.0)


def _closure(value: float) -> Any:
    return lambda x: torch.full((4,), value)


@pytest.mark.parametrize(("first", "second"), [(_times_two, _times_three), (_closure(2.0), _closure(3.0))],
                         ids=["constant", "closure"])
def test_inductor_pass_uuid_changes_with_what_a_helper_computes(first: Any, second: Any) -> None:
    torch.testing.assert_close(first(None) * 1.5, second(None))  # they compute different tensors
    rules = fxrules.parse("rule r:\n    relu(x) => x * @scale(x)\n", "scale.fxr")
    assert fxrules.inductor_pass(rules, helpers={"scale": first}).uuid() != \
        fxrules.inductor_pass(rules, helpers={"scale": second}).uuid()


# ---------------------------------------------------------------- review findings


def test_a_program_without_user_inputs_gets_its_new_buffer_after_its_other_inputs() -> None:
    class Weights(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self) -> torch.Tensor:
            return torch.relu(self.w) * 2

    model = Weights()
    result = fxrules.apply_program(torch.export.export(model, ()), fxrules.parse(
        "rule r:\n    relu(x) => torch.add(x, @zeros())\n", "z.fxr"), helpers={"zeros": lambda: torch.zeros(3)})
    assert result.report.counts() == {"r": 1}
    assert [spec.target for spec in result.program.graph_signature.input_specs] == ["w", "zeros"]
    torch.testing.assert_close(round_trip(result.program).module()(), model.w.detach() * 2)


def test_the_subgraph_restriction_of_a_program_does_not_outlive_its_rewrite() -> None:
    class Region(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                y = torch.neg(torch.neg(x)) * 2  # x * 2 is computed without grad too: a rewrite there is sound
            return torch.relu(y)

    x = torch.randn(3)
    result = fxrules.apply_program(torch.export.export(Region(), (x,)), "algebra.fxr")
    assert result.report.counts() == {"double_neg": 1}
    assert all(NO_NEW_TENSORS not in sub.meta for sub in result.program.graph_module.children())
    module = result.program.module()  # a plain graph module now: helpers may add tensors to its subgraphs
    report = fxrules.apply(module, fxrules.parse("rule r:\n    torch.ops.aten.relu.default(x) => x\n", "r.fxr"))
    assert report.counts() == {"r": 1}


def test_post_grad_passes_may_emit_operators_inductor_lowers() -> None:
    rules = fxrules.parse("rule double:\n    aten.mul.Tensor(x, 2) => torch.add(x, x)\n", "double.fxr")
    graph_pass = fxrules.inductor_pass(rules)
    assert_inductor_computes_as_eager(lambda x: torch.sin(x) * 2, torch.randn(4), post_grad_custom_post_pass=graph_pass)
    assert [report.counts() for report in graph_pass.reports] == [{"double": 1}]


def _calls_a_global(x: Any) -> Any:
    return _global_helper_scale(x)


def _global_helper_scale(x: Any) -> Any:
    return x


def test_inductor_pass_uuid_follows_the_functions_a_helper_calls() -> None:
    global _global_helper_scale  # noqa: PLW0603 - redefined on purpose, as an edited helper module would be
    rules = fxrules.parse(BROKEN, "broken.fxr")
    before = fxrules.inductor_pass(rules, helpers={"broken": _calls_a_global}).uuid()
    original = _global_helper_scale
    try:
        _global_helper_scale = lambda x: x * 2  # noqa: E731
        after = fxrules.inductor_pass(rules, helpers={"broken": _calls_a_global}).uuid()
    finally:
        _global_helper_scale = original
    assert before != after


def test_inductor_pass_uuid_of_a_recursive_helper() -> None:
    def make() -> Any:
        def countdown(x: Any, n: int = 2) -> Any:
            return x if n == 0 else countdown(x, n - 1)
        return countdown

    rules = fxrules.parse(BROKEN, "broken.fxr")
    first = fxrules.inductor_pass(rules, helpers={"broken": make()}).uuid()
    assert fxrules.inductor_pass(rules, helpers={"broken": make()}).uuid() == first


def test_apply_of_a_program_takes_no_example_inputs() -> None:
    program = torch.export.export(nn.ReLU(), (torch.randn(2),))
    with pytest.raises(fxrules.FxrUsageError, match="an ExportedProgram carries its own shape metadata"):
        fxrules.apply(program, "algebra.fxr", example_inputs=[torch.randn(2)])
