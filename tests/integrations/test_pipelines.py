"""fxrules inside real pipelines: the torch.compile backend, ExportedProgram in and out, the Inductor pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
import torch._dynamo
import torch.fx
from torch.export.graph_signature import InputKind

import fxrules
from fxrules.integrations.pipelines import FxrCompileError
from tests.integrations.pipeline_helpers import WithLinear, assert_inductor_computes_as_eager, round_trip
from tests.models import MODELS, cnn, run
from tests.test_docs import extract_blocks

nn = torch.nn
F = torch.nn.functional

DOUBLE_RELU = "rule relu_twice:\n    relu(relu(x)) => relu(x)\n"
DOUBLE_NEG = "rule double_neg:\n    neg(neg(x)) => x\n"


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


class Breaking(WithLinear):
    """Two rewrite sites on either side of a graph break."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(torch.relu(self.linear(x))) * 1
        torch._dynamo.graph_break()
        return torch.exp(torch.neg(torch.neg(y)) + -0.0)  # x + -0.0 is x for every float; x + 0 is not (-0.0)


def _counts(reports: list[fxrules.Report]) -> list[dict[str, int]]:
    return [report.counts() for report in reports]


# ---------------------------------------------------------------- torch.compile backend


@pytest.mark.parametrize("then", ["eager", "inductor"])
def test_backend_rewrites_every_graph_of_a_graph_break(then: str) -> None:
    model = Breaking().eval()
    x = torch.randn(4, 8)
    backend = fxrules.backend("algebra.fxr", then=then)
    with torch.no_grad():
        compiled = torch.compile(model, backend=backend)(x)
        expected = model(x)
    torch.testing.assert_close(compiled, expected)
    assert _counts(backend.reports) == [{"relu_idempotent": 1, "mul_one": 1}, {"double_neg": 1, "add_negative_zero": 1}]


def test_backend_hands_the_rewritten_graph_to_a_callable() -> None:
    seen: list[list[str]] = []

    def record(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        seen.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    backend = fxrules.backend(fxrules.parse(DOUBLE_RELU), then=record)
    out = torch.compile(lambda x: torch.relu(torch.relu(x)) + 1, backend=backend)(torch.tensor([-1.0, 2.0]))
    torch.testing.assert_close(out, torch.tensor([1.0, 3.0]))
    assert len(seen) == 1 and sum("relu" in target for target in seen[0]) == 1


def test_backend_guards_use_dynamo_metadata() -> None:
    rules = fxrules.parse(
        "rule addmm_2d:\n"
        "    given:\n        a: Tensor[M, K]\n        w: Tensor[K, N]\n        b: Tensor[N]\n"
        "    pattern:\n        return add(matmul(a, w), b)\n"
        "    replace:\n        return torch.addmm(b, a, w)\n")
    backend = fxrules.backend(rules, then="eager")
    a, w, b = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5)
    out = torch.compile(lambda a, w, b: a @ w + b, backend=backend)(a, w, b)
    torch.testing.assert_close(out, a @ w + b)
    assert _counts(backend.reports) == [{"addmm_2d": 1}]


def test_backend_skips_folds_whose_parameters_are_graph_inputs() -> None:
    case = cnn()
    backend = fxrules.backend("fusions.fxr", then="eager")
    with torch.no_grad():
        out = torch.compile(case.eager, backend=backend)(*case.inputs)
    torch.testing.assert_close(out, run(case.eager, case.inputs))
    (report,) = backend.reports
    assert report.fired("fold_conv2d_bn_functional") == 0
    assert report["fold_conv2d_bn_functional"].skip_counts == {"value unknown": 3}
    assert "which is a graph input (as parameters are in torch.compile graphs and in subgraphs of" in str(report)
    assert report.fired("silu") == 1  # y * torch.sigmoid(y) still fuses


def test_backend_rule_error_is_an_fxr_error_and_the_model_still_runs_eagerly() -> None:
    def broken(x: Any) -> Any:
        raise ValueError("no fold today")

    rules = fxrules.parse("rule boom:\n    relu(x) => torch.neg(@broken(x))\n", "broken.fxr")
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    x = torch.randn(2, 4)
    with pytest.raises(fxrules.FxrError) as caught:
        torch.compile(model, backend=fxrules.backend(rules, then="eager", helpers={"broken": broken}))(x)
    assert isinstance(caught.value, FxrCompileError)
    message = str(caught.value).splitlines()[0]  # Dynamo appends a line about TORCHDYNAMO_VERBOSE
    assert message == "broken.fxr:1:6: rule boom failed at node 'input_2': ValueError: no fold today"
    assert isinstance(caught.value.error, fxrules.FxrApplyError)
    torch.testing.assert_close(model(x), torch.relu(model[0](x)))


def test_backend_arguments_are_checked_when_it_is_built() -> None:
    with pytest.raises(fxrules.FxrUsageError, match=r"then='no_such_backend' is not a torch\.compile backend"):
        fxrules.backend("algebra.fxr", then="no_such_backend")
    with pytest.raises(fxrules.FxrUsageError, match=r"backend\(\) takes no example_inputs: compiled graphs carry"):
        fxrules.backend("algebra.fxr", example_inputs=[torch.ones(1)])
    with pytest.raises(fxrules.FxrLoadError):
        fxrules.backend(["algebra.fxr", fxrules.parse("rule bad:\n    torch.reluu(x) => x\n")])


# ---------------------------------------------------------------- Inductor custom pass


def test_inductor_pass_runs_inside_torch_compile() -> None:
    graph_pass = fxrules.inductor_pass("algebra.fxr")
    assert_inductor_computes_as_eager(Breaking().eval(), torch.randn(4, 8), post_grad_custom_post_pass=graph_pass)
    fired = [report.counts() for report in graph_pass.reports]
    assert fired == [{"relu_idempotent": 1, "mul_one": 1}, {"double_neg": 1, "add_negative_zero": 1}]


def test_inductor_pass_as_a_pre_grad_pass_sees_torch_level_graphs() -> None:
    graph_pass = fxrules.inductor_pass("algebra.fxr")
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.ReLU()).eval()
    assert_inductor_computes_as_eager(model, torch.randn(2, 4), pre_grad_custom_pass=graph_pass)
    assert [report.counts() for report in graph_pass.reports] == [{"relu_idempotent": 1}]


def test_inductor_pass_uuid_follows_the_rules_content(tmp_path: Path) -> None:
    path = tmp_path / "mine.fxr"
    path.write_text(DOUBLE_RELU)
    first = fxrules.inductor_pass(path).uuid()
    assert fxrules.inductor_pass(path).uuid() == first
    assert fxrules.inductor_pass(fxrules.parse(DOUBLE_RELU, "elsewhere.fxr")).uuid() == first
    path.write_text(DOUBLE_RELU.replace("relu(x)\n", "torch.relu(x)\n"))
    assert fxrules.inductor_pass(path).uuid() != first
    assert fxrules.inductor_pass(path, helpers={"h": lambda x: x}).uuid() != fxrules.inductor_pass(path).uuid()


def test_inductor_pass_accepts_a_ruleset_rebuilt_from_loaded_rules() -> None:
    """A RuleSet built by hand from loaded rules, or a selection, keys the cache on its rules' text and names."""
    rules = fxrules.parse(DOUBLE_RELU + DOUBLE_NEG)
    handmade = fxrules.RuleSet(tuple(rule for rule in rules if rule.name == "relu_twice"))
    selected = rules.select(only="relu_twice")
    assert fxrules.inductor_pass(handmade).uuid() == fxrules.inductor_pass(selected).uuid()
    assert fxrules.inductor_pass(selected).uuid() != fxrules.inductor_pass(rules).uuid()
    assert fxrules.inductor_pass(rules, only="*_*").uuid() == fxrules.inductor_pass(rules).uuid()
    assert fxrules.inductor_pass(rules, exclude="double_neg").uuid() == fxrules.inductor_pass(selected).uuid()


def test_inductor_pass_needs_rules_with_a_text() -> None:
    rules = fxrules.parse(DOUBLE_RELU)
    handmade = fxrules.RuleSet(tuple(attrs.evolve(rule, digest="") for rule in rules))
    with pytest.raises(fxrules.FxrUsageError, match="no content digest"):
        fxrules.inductor_pass(handmade)


# ---------------------------------------------------------------- ExportedProgram in, ExportedProgram out


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(torch.relu(self.bn(self.conv(x))))
        z = self.head(y.mean((2, 3))) * 1
        return z * torch.sigmoid(z)


def _conv_bn() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    model = ConvBN()
    model.bn.running_mean.uniform_(-1, 1)
    model.bn.running_var.uniform_(0.5, 2.0)
    return model.eval(), (torch.randn(2, 3, 8, 8),)


def test_exported_program_in_exported_program_out() -> None:
    model, inputs = _conv_bn()
    program = torch.export.export(model, inputs)
    code_before = program.graph_module.code
    result = fxrules.apply_program(program, ["algebra.fxr", "fusions.fxr"])
    assert result.report.counts() == {"fold_conv2d_bn_functional": 1, "silu": 1, "mul_one": 1,
                                      "relu_idempotent": 1}
    rewritten = result.program
    assert program.graph_module.code == code_before  # the input program is untouched
    targets = [str(n.target) for n in rewritten.graph.nodes if n.op == "call_function"]
    assert "aten.batch_norm.default" not in targets and "aten.silu.default" in targets
    assert all(isinstance(n.target, torch._ops.OpOverload) for n in rewritten.graph.nodes if n.op == "call_function")
    kinds = {spec.target: spec.kind for spec in rewritten.graph_signature.input_specs if spec.target}
    assert kinds == {"head.weight": InputKind.PARAMETER, "head.bias": InputKind.PARAMETER,
                     "bn.num_batches_tracked": InputKind.BUFFER,  # unused before, kept
                     "fold_conv_bn_weight": InputKind.BUFFER, "fold_conv_bn_bias": InputKind.BUFFER}
    assert sorted(rewritten.state_dict) == sorted(kinds)
    expected = run(model, inputs)
    torch.testing.assert_close(run(rewritten.module(), inputs), expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(run(round_trip(rewritten).module(), inputs), expected, atol=1e-5, rtol=1e-4)


def test_apply_returns_a_program_for_a_program() -> None:
    model, inputs = _conv_bn()
    program = torch.export.export(model, inputs)
    rewritten = fxrules.apply(program, "algebra.fxr")
    assert isinstance(rewritten, torch.export.ExportedProgram) and rewritten is not program
    assert sum(n.target is torch.ops.aten.relu.default for n in rewritten.graph.nodes) == 1
    nothing = fxrules.apply(program, fxrules.parse("rule never:\n    torch.exp(torch.log(x)) => x\n"))
    assert nothing is program


def test_cleanup_on_an_exported_program() -> None:
    class Shapes(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = (x * 2).view(2, 8)
            return (y + 1).clone().reshape(2, 8) * 3

    x = torch.randn(2, 8)
    result = fxrules.apply_program(torch.export.export(Shapes(), (x,)), "cleanup.fxr")
    assert result.report.counts() == {"view_same_shape": 1, "reshape_same_shape": 1, "clone_single_use": 1}
    torch.testing.assert_close(result.program.module()(x), Shapes()(x))


def test_exported_module_keeps_its_guards_and_rewrites_in_aten() -> None:
    case = cnn()
    gm = torch.export.export(case.eager, case.inputs).module()
    report = fxrules.apply(gm, ["fusions.fxr", "algebra.fxr"])
    assert report.fired("fold_conv2d_bn_functional") == 3  # the stem, the depthwise (groups=8), the pointwise
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["_guards_fn"]
    assert "aten.silu.default" in {str(n.target) for n in gm.graph.nodes}
    torch.testing.assert_close(run(gm, case.inputs), run(case.eager, case.inputs), atol=1e-5, rtol=1e-4)


def test_a_replacement_without_an_aten_spelling_is_skipped_in_an_aten_graph() -> None:
    program = torch.export.export(nn.Sigmoid(), (torch.randn(3),))
    result = fxrules.apply_program(program, fxrules.parse(
        "rule odd:\n    sigmoid(x) => torch.nn.functional.softsign(x)\n", "spell.fxr"))
    assert result.report.fired("odd") == 0
    assert result.report["odd"].skip_counts == {"no aten spelling": 1}
    assert ("sigmoid: spell.fxr:2:19: torch.nn.functional.softsign has no aten operator of the same name; "
            "name a family with an aten member in the replacement") in str(result.report)


# ---------------------------------------------------------------- docs/pipelines.md


PIPELINES_DOC = Path(__file__).resolve().parents[2] / "docs" / "pipelines.md"
SNIPPETS = extract_blocks(PIPELINES_DOC, "pipelines", {"python"})


def test_the_pipelines_doc_has_a_snippet_per_recipe() -> None:
    assert len(SNIPPETS) == 5


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda block: block.id)
def test_pipelines_doc_snippet(snippet: Any) -> None:
    """Each snippet runs as written and checks its own outcome with asserts."""
    code = compile(snippet.text, f"{PIPELINES_DOC}:{snippet.line}", "exec")
    exec(code, {"__name__": "pipelines_doc"})


# ---------------------------------------------------------------- higher-order operators


class Regions(WithLinear):
    """A rewrite site in the graph, one in an autocast region and one in a no_grad region."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(torch.relu(self.linear(x)))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = torch.relu(torch.relu(self.linear(y)))
        with torch.no_grad():
            w = torch.neg(torch.neg(z.float()))
        return w + y


def test_rules_apply_inside_higher_order_subgraphs() -> None:
    model, x = Regions().eval(), torch.randn(2, 8)
    program = torch.export.export(model, (x,))
    result = fxrules.apply_program(program, "algebra.fxr")
    assert result.report["relu_idempotent"].anchors == ("relu_1", "submod_1.relu_3")
    # the no_grad subgraph would return its own input: the rewriter cannot see what the outer graph does with it
    assert result.report["double_neg"].skip_counts == {"alias": 1}
    hops = [n.target for n in result.program.graph.nodes if isinstance(n.target, torch._ops.HigherOrderOperator)]
    assert hops == [torch.ops.higher_order.wrap_with_autocast, torch.ops.higher_order.wrap_with_set_grad_enabled]
    assert [str(n.target) for n in result.program.graph_module.submod_1.graph.nodes if n.op == "call_function"] \
        == ["aten.linear.default", "aten.relu.default"]
    torch.testing.assert_close(result.program.module()(x), model(x))
    torch.testing.assert_close(round_trip(result.program).module()(x), model(x))


def test_a_failure_in_the_graph_restores_the_subgraphs_already_rewritten() -> None:
    calls: list[str] = []

    def second_call_fails(x: Any) -> int:
        calls.append(x.name)
        if len(calls) > 1:
            raise RuntimeError("second call")
        return 0

    model, x = Regions().eval(), torch.randn(2, 8)
    gm = torch.export.export(model, (x,)).module()
    before = (gm.code, gm.submod_1.code, gm.submod_3.code, list(gm.submod_1.graph.nodes))
    rules = fxrules.parse("rule r:\n    relu(relu(x)) => torch.add(relu(x), @second(x))\n", "fails.fxr")
    with pytest.raises(fxrules.FxrApplyError, match="rule r failed at node 'relu_1': RuntimeError: second call"):
        fxrules.apply(gm, rules, helpers={"second": second_call_fails})
    assert calls == ["linear_1", "linear"]  # the subgraph's rewrite succeeded, then the graph's failed
    assert (gm.code, gm.submod_1.code, gm.submod_3.code, list(gm.submod_1.graph.nodes)) == before  # same nodes
    torch.testing.assert_close(gm(x), model(x))


# ---------------------------------------------------------------- real models through torch.export


EXPORTED_MODEL_COUNTS = {
    # Llama's rotary embedding runs in an autocast(enabled=False) region: `cos * attention_scaling` (1.0)
    # inside the higher-order op's subgraph is a mul_one; the second (`sin`) is skipped with reason 'alias': the
    # subgraph returns it and a view of the value it would become.
    "llama": {"mul_one": 1, "dropout_eval": 2},
    "bert": {"dropout_eval": 7, "sdpa_masked_div": 2},
    "gpt2": {"view_chain": 2, "dropout_eval": 7, "gelu_tanh": 2},
}


@pytest.mark.parametrize("name", sorted(EXPORTED_MODEL_COUNTS))
def test_bundled_rulesets_on_exported_real_models(name: str) -> None:
    case = MODELS[name]()
    kwargs = dict(zip(["input_ids", "attention_mask"], case.inputs, strict=False))
    program = torch.export.export(case.eager, (), kwargs=kwargs)
    result = fxrules.apply_program(program, ["algebra.fxr", "fusions.fxr", "cleanup.fxr"])
    assert result.report.counts() == EXPORTED_MODEL_COUNTS[name]
    if name == "llama":
        assert result.report["mul_one"].anchors == ("submod_1.mul",)
    expected = run(case.eager, (), kwargs)["last_hidden_state"]
    for rewritten in (result.program, round_trip(result.program)):
        out = run(rewritten.module(), (), kwargs)["last_hidden_state"]
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)


def test_post_grad_replacements_may_not_bring_back_decomposed_operators() -> None:
    class SwishTwice(nn.Module):
        def forward(self, y: torch.Tensor) -> torch.Tensor:
            return torch.neg(torch.neg(y * torch.sigmoid(y)))

    graph_pass = fxrules.inductor_pass(["fusions.fxr", "algebra.fxr"])
    assert_inductor_computes_as_eager(SwishTwice(), torch.randn(4), post_grad_custom_post_pass=graph_pass)
    (report,) = graph_pass.reports
    assert report.counts() == {"double_neg": 1}
    assert report["silu"].skip_counts == {"decomposed operator": 1}
    assert "the compiler decomposes aten.silu.default before this pass" in str(report)


def test_conv_bn_folds_after_run_decompositions() -> None:
    case = cnn()
    program = torch.export.export(case.eager, case.inputs).run_decompositions()
    result = fxrules.apply_program(program, "fusions.fxr")
    assert result.report.counts() == {"fold_convolution_bn_decomposed": 5, "silu": 1}  # 2d x3, 3d, 1d
    targets = {str(n.target) for n in result.program.graph.nodes}
    assert "aten._native_batch_norm_legit_no_training.default" in targets  # the Linear's BatchNorm1d stays
    expected = run(case.eager, case.inputs)
    torch.testing.assert_close(run(result.program.module(), case.inputs), expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(run(round_trip(result.program).module(), case.inputs), expected, atol=1e-5, rtol=1e-4)
