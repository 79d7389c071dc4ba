"""The code of every graph ``apply`` recompiles names torch functions by their public names
(``torch.nn.functional.gelu``, not ``torch._C._nn.gelu``), calls the very same objects, and survives every
way a graph module is saved, copied, traced again or exported."""

from __future__ import annotations

import copy
import importlib
import io
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
from torch.fx.graph import _PyTreeCodeGen

import fxrules
from fxrules.rewrite.spelling import PUBLIC_NAMESPACES, public_names, respell

F = torch.nn.functional

TANH_TO_GELU = fxrules.parse("rule tanh_to_gelu: torch.tanh(x) => F.gelu(x)\n")
LINEAR_AND_GELU = fxrules.parse("""
rule tanh_to_gelu: torch.tanh(x) => F.gelu(x)
rule logsigmoid_twice: F.logsigmoid(F.logsigmoid(x)) => F.logsigmoid(x)
""")


class _TanhBlock(torch.nn.Module):
    """A linear layer and a tanh (which the rule makes ``F.gelu``), then a ``F.gelu`` of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    # unannotated: with ``from __future__ import annotations`` FX would take the string "torch.Tensor" for the
    # input's type, a global that pickling (before any rewrite) cannot name
    def forward(self, x):  # type: ignore[no-untyped-def]
        return F.gelu(torch.tanh(self.lin(x)), approximate="tanh") + 1


def _rewritten() -> tuple[torch.fx.GraphModule, torch.Tensor, torch.Tensor]:
    """The block rewritten, an input, and what the rewritten block must compute for it."""
    torch.manual_seed(0)
    block = _TanhBlock().eval()
    gm = torch.fx.symbolic_trace(block)
    assert fxrules.apply(gm, TANH_TO_GELU).counts() == {"tanh_to_gelu": 1}
    x = torch.randn(3, 4)
    expected = F.gelu(F.gelu(block.lin(x)), approximate="tanh") + 1
    return gm, x, expected


def test_apply_spells_f_gelu_as_torch_nn_functional_gelu() -> None:
    """The gelu the rule made and the gelu the model had are both written ``torch.nn.functional.gelu``; the
    node targets stay the objects FX traced (``F.gelu`` is ``torch._C._nn.gelu``)."""
    gm, x, expected = _rewritten()
    assert gm.code.count("torch.nn.functional.gelu(") == 2
    assert "torch._C._nn" not in gm.code
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"][:2] == [torch._C._nn.gelu] * 2
    torch.testing.assert_close(gm(x), expected, rtol=0, atol=0)


def test_the_readable_code_is_spelled_publicly_too() -> None:
    gm, _, _ = _rewritten()
    assert "torch.nn.functional.gelu(" in gm.print_readable(print_output=False)


def test_a_graph_nothing_fired_on_keeps_its_code() -> None:
    """``apply`` recompiles only a graph it changed: the code of one it left alone is FX's, as it was."""
    gm = torch.fx.symbolic_trace(_TanhBlock())
    code = gm.code
    assert not fxrules.apply(gm, fxrules.parse("rule never: torch.sin(x) => x\n")).counts()
    assert gm.code == code and "torch._C._nn.gelu(" in code


@pytest.mark.parametrize("round_trip", ["pickle", "torch.save", "deepcopy", "symbolic_trace"])
def test_the_rewritten_module_round_trips_with_equal_outputs(round_trip: str) -> None:
    """Pickled, saved, deep-copied or traced again, the module computes what it did.  A deep copy keeps the
    public spelling; pickling and ``torch.save`` rebuild the graph from the code, so the loaded module's
    code is FX's own spelling again (of the same functions)."""
    gm, x, expected = _rewritten()
    if round_trip == "pickle":
        loaded = pickle.loads(pickle.dumps(gm))
    elif round_trip == "torch.save":
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
    elif round_trip == "deepcopy":
        loaded = copy.deepcopy(gm)
        assert loaded.code == gm.code
    else:
        loaded = torch.fx.symbolic_trace(gm)
        targets = [n.target for n in loaded.graph.nodes if n.op == "call_function"]
        assert targets.count(torch._C._nn.gelu) == 2
    torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)


def test_to_folder_writes_importable_code_with_public_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gm, x, expected = _rewritten()
    gm.to_folder(tmp_path / "rewritten_block", "RewrittenBlock")
    assert "torch.nn.functional.gelu(" in (tmp_path / "rewritten_block" / "module.py").read_text()
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = importlib.import_module("rewritten_block").RewrittenBlock()
    monkeypatch.delitem(sys.modules, "rewritten_block")
    torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)


def test_the_rewritten_module_exports() -> None:
    gm, x, expected = _rewritten()
    program = torch.export.export(gm, (x,))
    torch.testing.assert_close(program.module()(x), expected, rtol=0, atol=0)


def test_an_exported_programs_aten_code_is_left_as_fx_writes_it() -> None:
    """Aten operators (``torch.ops.aten._softmax``, private-looking as it is) have no public spelling of the
    same object: an exported program's code keeps FX's names."""
    model = torch.nn.Sequential(torch.nn.Softmax(-1), torch.nn.GELU()).eval()
    x = torch.randn(2, 3)
    program = torch.export.export(model, (x,)).run_decompositions()
    rewritten = fxrules.apply_program(program, fxrules.parse("rule gelu_to_relu: aten.gelu.default(x) => "
                                                             "aten.relu.default(x)\n"))
    assert rewritten.report.counts() == {"gelu_to_relu": 1}
    code = rewritten.program.graph_module.code
    assert "torch.ops.aten._softmax.default(" in code
    assert "torch.ops.aten.relu.default(" in code and "torch.nn.functional" not in code
    torch.testing.assert_close(rewritten.program.module()(x), torch.relu(torch.softmax(x, -1)))


def test_a_dynamo_graph_through_the_backend_is_spelled_publicly() -> None:
    """The graph ``torch.compile`` hands ``fxrules.backend`` reaches the next backend with public names."""
    seen: list[str] = []

    def then(gm: torch.fx.GraphModule, _: Any) -> Any:
        seen.append(gm.code)
        return gm.forward

    torch._dynamo.reset()
    x = torch.randn(3, 4)
    compiled = torch.compile(lambda t: F.gelu(torch.tanh(t)) * 2, backend=fxrules.backend(TANH_TO_GELU, then=then))
    torch.testing.assert_close(compiled(x), F.gelu(F.gelu(x)) * 2, rtol=0, atol=0)
    assert len(seen) == 1 and seen[0].count("torch.nn.functional.gelu(") == 2 and "torch._C._nn" not in seen[0]


def test_a_pytree_graph_keeps_its_code_generator_and_is_spelled_publicly() -> None:
    """A graph with Dynamo's pytree code generator keeps that generator (torch checks its class) and is
    spelled publicly by the same means."""
    x = torch.randn(3, 4)
    gm = torch._dynamo.export(lambda t: F.gelu(torch.tanh(t)))(x).graph_module
    assert isinstance(gm.graph._codegen, _PyTreeCodeGen)
    assert fxrules.apply(gm, TANH_TO_GELU).counts() == {"tanh_to_gelu": 1}
    assert isinstance(gm.graph._codegen, _PyTreeCodeGen)
    assert gm.code.count("torch.nn.functional.gelu(") == 2
    torch.testing.assert_close(gm(x), F.gelu(F.gelu(x)), rtol=0, atol=0)


def test_a_user_code_transformer_still_runs_and_a_second_apply_adds_no_second_respelling() -> None:
    gm = torch.fx.symbolic_trace(lambda t: F.logsigmoid(F.logsigmoid(torch.tanh(t))))
    gm.graph.on_generate_code(lambda previous: lambda body: ["# checked\n", *body])
    assert fxrules.apply(gm, LINEAR_AND_GELU).counts() == {"tanh_to_gelu": 1, "logsigmoid_twice": 1}
    assert gm.code.count("# checked") == 1
    assert "torch.nn.functional.logsigmoid(torch.nn.functional.gelu" not in gm.code  # one node per line
    assert "torch.nn.functional.logsigmoid(gelu)" in gm.code
    assert fxrules.apply(gm, TANH_TO_GELU).counts() == {}
    x = torch.randn(5)
    torch.testing.assert_close(gm(x), F.logsigmoid(F.gelu(x)), rtol=0, atol=0)


def test_a_failed_commit_leaves_the_graphs_spelling_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit that fails after recompiling (deleting the submodule the rewrite left unused) takes back
    the public spelling with the rest: the module's code, and the code a later recompile writes, are FX's."""
    gm = torch.fx.symbolic_trace(_TanhBlock())
    code = gm.code

    def refuse(*_: Any) -> bool:
        raise RuntimeError("cannot delete")

    monkeypatch.setattr(torch.fx.GraphModule, "delete_submodule", refuse)
    with pytest.raises(fxrules.FxrApplyError):
        fxrules.apply(gm, fxrules.parse("rule drop_linear:\n    given:\n        l: nn.Linear\n    pattern:\n"
                                         "        return l(x)\n    replace:\n        return x\n"))
    assert gm.code == code
    gm.recompile()
    assert gm.code == code and "torch._C._nn.gelu(" in code


def test_respelling_changes_whole_names_in_code_only() -> None:
    """Names inside string literals and comments, longer names and attributes of other objects stay."""
    source = ("    a = torch._C._nn.gelu(x, approximate = 'torch._C._nn.gelu\\' torch._C._nn.gelu')"
              "  # torch._C._nn.gelu\n"
              "    b = torch._C._nn.gelu_foo(a) + x.torch._C._nn.gelu(a) + xtorch._C._nn.gelu(a)\n"
              "    c = \"it's\" + torch._C._nn.gelu(b) + torch._C._special.special_erfcx(b)\n")
    assert respell(source) == (
        "    a = torch.nn.functional.gelu(x, approximate = 'torch._C._nn.gelu\\' torch._C._nn.gelu')"
        "  # torch._C._nn.gelu\n"
        "    b = torch._C._nn.gelu_foo(a) + x.torch._C._nn.gelu(a) + xtorch._C._nn.gelu(a)\n"
        "    c = \"it's\" + torch.nn.functional.gelu(b) + torch.special.erfcx(b)\n")


def _resolve(dotted: str) -> Any:
    root, *parts = dotted.split(".")
    found: Any = importlib.import_module(root)
    for part in parts:
        found = getattr(found, part)
    return found


def test_every_public_name_is_the_very_object_its_private_name_is() -> None:
    names = public_names()
    assert names["torch._C._nn.gelu"] == "torch.nn.functional.gelu"
    assert names["torch._C._nn.log_sigmoid"] == "torch.nn.functional.logsigmoid"
    assert names["torch._C._linalg.linalg_vector_norm"] == "torch.linalg.vector_norm"
    for private, public in names.items():
        assert "._" in private and "._" not in public and public.rsplit(".", 1)[0] in PUBLIC_NAMESPACES
        assert _resolve(private) is _resolve(public), private


def test_an_object_public_in_several_namespaces_gets_the_first_namespaces_name() -> None:
    """``has_torch_function`` is public in torch.nn.functional and torch.autograd: the first wins, every run."""
    assert public_names()["torch._C._has_torch_function"] == "torch.nn.functional.has_torch_function"
