"""The command line driving real models: inputs from specs, the three traces, saved results that load back,
rule choice, user helpers and predicates, and one-line errors for bad input."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from fxrules.cli import main
from fxrules.integrations.driving import example_inputs

pytest_plugins = ["pytester"]

MODELS = """\
import torch


class Tokens(torch.nn.Module):
    \"\"\"Token ids in, a float out: an embedding, then arithmetic the bundled rules simplify.\"\"\"

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(1000, 8)
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, ids):
        h = self.embed(ids)
        return torch.relu(torch.relu(torch.neg(torch.neg(self.linear(h)))))


class TwoInputs(torch.nn.Module):
    def forward(self, x, mask):
        return torch.neg(torch.neg(x)) * mask


class FloatPair(torch.nn.Module):
    \"\"\"Two float inputs, a tuple holding a dict out: a folder keeps that structure whatever the trace.\"\"\"

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x, y):
        s = torch.neg(torch.neg(self.linear(x))) + y
        return s, {"gelu": torch.nn.functional.gelu(s)}


class Labelled:
    def __init__(self, value):
        self.value = value


@torch.fx.wrap
def labelled(x):
    return Labelled(x)


class LabelledOutput(torch.nn.Module):
    \"\"\"Symbolic tracing keeps the wrapped call; torch.export cannot return a Labelled.\"\"\"

    def forward(self, x):
        return labelled(torch.neg(torch.neg(x)))


def raising():
    raise RuntimeError("no weights here")
"""

HELPERS = """\
import torch


def twice(x):
    return 2 * x


HELPERS = {"twice": twice}
PREDICATES = {"is_float32": lambda x: x.dtype == torch.float32}
"""

USER_RULES = """\
rule scale_by_helper:
    given:
        x: Tensor
        c: int
    pattern:
        return torch.mul(x, c)
    where:
        is_float32(x)
    replace:
        return torch.multiply(x, @twice(c) // 2)
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh module of models (and one of helpers) in a temporary working directory; the module's name."""
    name = f"cli_models_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(MODELS, encoding="utf-8")
    (tmp_path / f"{name}_helpers.py").write_text(HELPERS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in (name, f"{name}_helpers", "rewritten", "rewritten.module"):  # the saved folder's package
        sys.modules.pop(module, None)


def _model(models: str, name: str) -> torch.nn.Module:
    return getattr(importlib.import_module(models), name)().eval()


def _saved_folder() -> torch.nn.Module:
    """The module of the folder ``--output rewritten`` wrote (found afresh: importlib caches directory
    listings, which may predate the folder)."""
    importlib.invalidate_caches()
    return importlib.import_module("rewritten").Rewritten()


#: Each model's inputs: token ids, and two floats
INPUTS = {"Tokens": ["int64[2,16]:0..1000"], "FloatPair": ["float32[4,3]", "float32[4,3]:-1..1"]}
FORWARD = {"Tokens": "def forward(self, ids):", "FloatPair": "def forward(self, x, y):"}


@pytest.mark.filterwarnings("error:Was not able to save the following children")  # to_folder's, kept quiet
@pytest.mark.parametrize("kind", ["pt2", "folder"])
@pytest.mark.parametrize("trace", ["symbolic", "export", "dynamo"])
@pytest.mark.parametrize("model", list(INPUTS))
def test_every_trace_saves_a_program_and_a_folder_that_load_back_and_compute_the_same(
        models: str, tmp_path: Path, model: str, trace: str, kind: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--output x.pt2`` (the graph exported when it is not a program already) loads with torch.export.load;
    ``--output DIR`` (Dynamo's and export's graphs traced again into a plain signature) imports from any
    working directory, as a module taking the model's inputs; both compute what the model does on other
    values of the same sizes (an exported program is specialized to them), without the rewritten negations."""
    output = tmp_path / ("rewritten.pt2" if kind == "pt2" else "rewritten")
    inputs = [argument for spec in INPUTS[model] for argument in ("--input", spec)]
    assert main(["apply", "algebra.fxr", "cleanup.fxr", "--model", f"{models}:{model}", *inputs, "--trace", trace,
                 "--output", str(output)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.endswith(f"saved the {'exported program' if kind == 'pt2' else 'graph module'} to {output}\n")
    assert re.search(r"^double_neg +1 ", out, re.MULTILINE)
    monkeypatch.chdir(tmp_path.parent)
    if kind == "pt2":
        loaded = torch.export.load(output).module()
        code = loaded.code
    else:
        loaded = _saved_folder()
        code = (output / "module.py").read_text(encoding="utf-8")
        assert FORWARD[model] in code
    assert not re.search(r"\bneg\b", code)
    values = example_inputs(INPUTS[model], seed=1)
    with torch.no_grad():
        torch.testing.assert_close(loaded(*values), _model(models, model)(*values))


@pytest.mark.parametrize(("arguments", "message"), [
    (["--output", "tokens.pt2"], "--output tokens.pt2: a .pt2 program is the graph exported on example inputs: give "
                                 "--input, or save a folder (--output DIR)"),
    (["--input", "int64[2]", "--output", "missing/tokens.pt2"], "--output missing/tokens.pt2: the folder missing "
                                                                "does not exist"),
    (["--input", "int64[2]", "--trace", "dynamo", "--output", "missing/rewritten"],
     "--output missing/rewritten: the folder missing does not exist"),
    (["--input", "int64[2]", "--trace", "export", "--output", "a_file"],
     "--output a_file: a file of that name exists; a graph module is saved as a folder (or give a .pt2 or .py path)"),
])
def test_an_output_that_cannot_be_written_is_refused_before_the_model_is_built(
        models: str, tmp_path: Path, arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a_file").write_text("", encoding="utf-8")
    assert main(["apply", "algebra.fxr", "--model", f"{models}:raising", *arguments]) == 2
    assert capsys.readouterr().err == f"fxrules apply: error: {message}\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([f"{models}.py", f"{models}_helpers.py",
                                                                       "a_file"])


def test_a_graph_torch_export_cannot_export_is_one_line_that_says_to_save_a_folder(
        models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["apply", "algebra.fxr", "--model", f"{models}:LabelledOutput", "--input", "float32[3]"]
    assert main([*arguments, "--output", "labelled.pt2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"cannot export the rewritten graph for --output labelled.pt2: RuntimeError: Found <class "
                          f"'{models}.Labelled'> in output, which is not a known type.")
    assert err.endswith("; save a folder (--output DIR) instead\n") and err.count("\n") == 1


def test_input_specs_draw_tensors_of_their_dtype_sizes_and_range() -> None:
    ids, mask, x, scalar = example_inputs(["int64[2,16]:5..9", "bool[2,16]", "float16[3]:-1..1", "float32[]"])
    assert (ids.dtype, ids.shape, int(ids.min()) >= 5, int(ids.max()) <= 8) == (torch.int64, (2, 16), True, True)
    assert (mask.dtype, mask.shape) == (torch.bool, (2, 16))
    assert x.dtype == torch.float16 and bool((x.abs() <= 1).all())
    assert scalar.shape == ()
    assert torch.equal(example_inputs(["int64[4]:0..1000"])[0], example_inputs(["int64[4]:0..1000"])[0])


@pytest.mark.parametrize(("arguments", "message"), [
    (["--input", "int64[2,x]"], "--input 'int64[2,x]': sizes are whole numbers separated by commas, as in [2,16]"),
    (["--input", "int46[2]"], "--input 'int46[2]': unknown dtype 'int46'; did you mean 'int64'? (known: bool, uint8, "
                              "int8, int16, int32, int64, float16, bfloat16, float32, float64, complex64, complex128)"),
    (["--input", "int64[2]:9..1"], "--input 'int64[2]:9..1': the range 9..1 is empty (it holds LOW, not HIGH)"),
    (["--input", "bool[2]:0..1"], "--input 'bool[2]:0..1': a range is LOW..HIGH of two numbers, for a number dtype"),
    (["--input", "2,16"], "--input '2,16': write DTYPE[SIZES] with an optional range, as in int64[2,16] or "
                          "int64[2,16]:0..1000"),
    (["--input", "int8[2]:0..1000"], "--input 'int8[2]:0..1000': the range 0..1000 does not fit int8 (-128..128)"),
    (["--input", "float32[100000,100000]"],
     "--input 'float32[100000,100000]': 10000000000 elements is more than the 268435456 allowed"),
    (["--input-shape", "4x16"], "--input-shape '4x16': sizes are whole numbers separated by commas, as in 2,3 "
                                "(or use --input 'float32[2,3]')"),
    (["--input", "float32[2]", "--input", "float32[2]"],
     "the model takes 1 input (ids), but 2 --input were given"),
    (["--trace", "export"], "--trace export runs the model: give its inputs with --input"),
    (["--input", "int64[2]", "--output", "x.pt2", "--rule", "double_nag"],
     "--rule: no rule named 'double_nag' in the rules; did you mean 'double_neg'?"),
    (["--helpers", "no_such_helpers_module"],
     "--helpers 'no_such_helpers_module': cannot import no_such_helpers_module: No module named "
     "'no_such_helpers_module'"),
])
def test_bad_command_line_input_is_one_line_and_exit_2(models: str, arguments: list[str], message: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "algebra.fxr", "--model", f"{models}:Tokens", *arguments]) == 2
    assert capsys.readouterr().err == f"fxrules apply: error: {message}\n"


def test_argparse_mistakes_are_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["apply", "algebra.fxr", "--model", "m:f", "--trace", "jit"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("fxrules apply: error: argument --trace: invalid choice: 'jit' (choose from "
                                       "'symbolic', 'export', 'dynamo')\n")


def test_a_model_that_fails_is_one_line_and_exit_1(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "algebra.fxr", "--model", f"{models}:raising"]) == 1
    assert capsys.readouterr().err == (f"--model '{models}:raising': the factory raised RuntimeError: no weights "
                                       "here\n")


def test_rule_and_exclude_choose_rules_of_several_files(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "algebra.fxr", "cleanup.fxr", "--model", f"{models}:TwoInputs", "--rule", "double_*",
                 "--rule", "relu_*", "--exclude", "double_transpose"]) == 0
    out, _ = capsys.readouterr()
    assert re.findall(r"^(\w+) +\d+ +\d+ ", out, re.MULTILINE) == ["double_neg", "relu_idempotent"]
    assert "-    neg = torch.neg(x)" in out


def test_helpers_module_gives_apply_and_verify_helpers_and_predicates(
        models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "user.fxr"
    rules.write_text(USER_RULES, encoding="utf-8")
    source = tmp_path / "scaled.py"
    source.write_text("import torch\n\ndef make():\n    return Scaled()\n\n"
                      "class Scaled(torch.nn.Module):\n    def forward(self, x):\n        return torch.mul(x, 3)\n")
    sys.modules.pop("scaled", None)
    assert main(["apply", str(rules), "--model", "scaled:make", "--input", "float32[2]"]) == 1
    assert "calls unknown predicate 'is_float32'" in capsys.readouterr().err
    assert main(["apply", str(rules), "--model", "scaled:make", "--input", "float32[2]",
                 "--helpers", f"{models}_helpers"]) == 0
    assert "scale_by_helper      1" in capsys.readouterr().out.replace("  ", " " * 2)
    assert main(["verify", str(rules), "--examples", "10", "--helpers", f"{models}_helpers"]) == 0
    assert f"{rules}:1:6: scale_by_helper: sound" in capsys.readouterr().out
    (tmp_path / "empty_helpers.py").write_text("X = 1\n", encoding="utf-8")
    assert main(["verify", str(rules), "--helpers", "empty_helpers"]) == 2
    assert capsys.readouterr().err == ("fxrules verify: error: --helpers 'empty_helpers': the module has neither "
                                       "HELPERS nor PREDICATES (mappings of names to functions)\n")


def test_pytest_plugin_reads_helpers_from_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(user_helpers=HELPERS)
    pytester.makefile(".fxr", user=USER_RULES)
    pytester.makeini("[pytest]\nfxrules_helpers =\n    user_helpers\n")
    result = pytester.runpytest("--fxrules", ".", "--fxrules-examples", "10", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest("--fxrules", ".", "--fxrules-examples", "10", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*calls unknown predicate 'is_float32'*"])


LOOPING = """\
rule grows:
    torch.sigmoid(x) => torch.sigmoid(torch.sigmoid(x))
"""


def test_each_warning_is_printed_once(models: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "loop.fxr"
    rules.write_text(LOOPING, encoding="utf-8")
    assert main(["check", str(rules)]) == 0
    _, err = capsys.readouterr()
    assert err.count("rule grows: its pattern matches its own replacement") == 1, err
    main(["apply", str(rules), "--model", f"{models}:TwoInputs", "--rule", "grows"])
    _, err = capsys.readouterr()
    assert err.count("rule grows: its pattern matches its own replacement") == 1, err


def test_bundled_notes_only_with_verbose(models: str, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["apply", "algebra.fxr", "--model", f"{models}:Tokens", "--input", "int64[2,16]"]
    assert main(arguments) == 0
    assert "  note " not in capsys.readouterr().out
    assert main([*arguments, "--verbose"]) == 0
    assert "  note view_chain: arguments of family view are compared as written" in capsys.readouterr().out


def test_no_numpy_warning_when_torch_has_no_numpy(tmp_path: Path) -> None:
    """In a venv with torch but no NumPy, torch warns on import; the fxrules command does not pass that on."""
    (tmp_path / "numpy").mkdir()
    missing = "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n"
    (tmp_path / "numpy" / "__init__.py").write_text(missing, encoding="utf-8")
    script = textwrap.dedent("""\
        import sys, warnings
        warnings.simplefilter("default")
        from fxrules.cli import main
        sys.exit(main(["check", "algebra.fxr"]))
        """)
    root = Path(__file__).resolve().parents[2]
    environment = {"PYTHONPATH": f"{tmp_path}:{root}", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            check=False, env=environment, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "NumPy" not in result.stderr, result.stderr
    bare = subprocess.run([sys.executable, "-W", "default", "-c", "import torch"], capture_output=True, text=True,
                          timeout=300, check=False, env=environment, cwd=tmp_path)
    assert "Failed to initialize NumPy" in bare.stderr  # the warning this test would see
