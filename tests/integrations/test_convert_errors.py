"""`fxrules convert` and rule_text on what does not trace: an fxrules error naming the side, no traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import fxrules
from fxrules.cli import main
from fxrules.integrations.convert import rule_text

HOSTILE = '''\
import torch


def replacement(x):
    return x


def raises(x):
    raise RuntimeError("boom")


def branches(x):
    if x.sum() > 0:
        return x
    return -x


not_a_function = 3
'''


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hostile_specs.py").write_text(HOSTILE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "hostile_specs", raising=False)


@pytest.mark.parametrize(("spec", "message"), [
    ("hostile_specs:raises", "cannot trace the pattern: RuntimeError: boom"),
    ("hostile_specs:branches", "cannot trace the pattern: TraceError: symbolically traced variables cannot be "
                               "used as inputs to control flow"),
    ("hostile_specs:not_a_function", "the pattern (int) is not a function, nn.Module or Graph"),
    ("os:getcwd", "cannot trace the pattern: AssertionError: Expected FunctionType, got "
                  "<class 'builtin_function_or_method'>"),
])
def test_convert_of_what_does_not_trace_is_an_error(hostile: None, capsys: pytest.CaptureFixture[str],
                                                     spec: str, message: str) -> None:
    assert main(["convert", spec, "hostile_specs:replacement"]) == 2
    assert capsys.readouterr().err == f"fxrules convert: error: {message}\n"


def test_convert_of_an_empty_module_name_cannot_load(hostile: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", ":replacement", "hostile_specs:replacement"]) == 2
    assert capsys.readouterr().err == ("fxrules convert: error: the pattern ':replacement': "
                                       "write package.module or package.module:name\n")


def test_rule_text_names_the_replacement_when_it_does_not_trace() -> None:
    def boom(x: object) -> object:
        raise ValueError("no")

    with pytest.raises(fxrules.FxrUsageError, match="cannot trace the replacement: ValueError: no"):
        rule_text(lambda x: x + 1, boom)
