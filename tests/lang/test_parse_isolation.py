"""Each parse is its own: what one parse reports does not depend on the parses before it or running beside it.

The parser keeps one builder per parser object and extends the trees of repetitions (arguments, decorators,
statements) in place as it reads them; these tests pin that a parse's errors, with their file:line:col, are
the same whether it runs alone, after a parse that failed inside a repetition, or from several threads at once.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import pytest

import fxrules
from fxrules import FxrError

_NAMES = ", ".join(f"x{i}" for i in range(300))

#: Texts whose first error line each test pins, by what they exercise.
TEXTS = {
    "unclosed_repetition": f"rule r: torch.cat([{_NAMES}) => x0\n",
    "long_repetition": f"rule r: torch.cat([{_NAMES}]) => torch.cat([{_NAMES}, torch.nope(x1)])\n",
    "decorators": "@tolerance(atol=1)\n@tolerance(rtol=2)\n@bogus()\nrule r: torch.neg(x) => x\n",
    "statements": "rule r:\n    pattern:\n        a = torch.neg(x)\n        b = torch.neg(a)\n        return b\n"
                  "    replace:\n        return f(x)[0]\n",
    "keywords": "rule r: torch.sum(x, dim=1, keepdim=True, nope=(x).y) => x\n",
}

FIRST_LINES = {
    "unclosed_repetition": "unclosed_repetition.fxr:1:1708: error: expected a closing ']'",
    "long_repetition": "long_repetition.fxr:1:3421: error: unknown target 'torch.nope'",
    "decorators": "decorators.fxr:3:1: error: unknown decorator '@bogus'",
    "statements": "statements.fxr:7:16: error: unknown family 'f'",
    "keywords": "keywords.fxr:1:43: error: torch.sum() has no parameter 'nope'",
}


def _report(text: str, filename: str) -> str:
    """The rules ``text`` parses to, or its error, as the user reads them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return repr(list(fxrules.parse(text, filename)))
        except FxrError as error:
            return str(error)


def test_errors_inside_repetitions_and_at_sub_expressions_are_located_at_the_bad_token() -> None:
    """A syntax error after 300 arguments, a resolve error after 600, a decorator, a statement and a keyword
    argument are each reported at the line and column of what is wrong."""
    for name, text in TEXTS.items():
        assert _report(text, f"{name}.fxr").splitlines()[0] == FIRST_LINES[name]


def test_a_parse_after_one_that_failed_inside_a_repetition_reports_what_it_reports_alone() -> None:
    """A parse that fails in the middle of a repetition leaves nothing behind: each text parsed again, after
    every other text and under a new name, reports exactly what it reported first."""
    first = {name: _report(text, f"{name}.fxr") for name, text in TEXTS.items()}
    for round_ in range(3):
        for name, text in TEXTS.items():
            again = _report(text, f"{name}{round_}.fxr").replace(f"{name}{round_}.fxr", f"{name}.fxr")
            assert again == first[name]


def test_parses_from_four_threads_at_once_report_what_each_reports_alone() -> None:
    """Four threads parsing the texts at once, each under its own file names, get what one parse alone gets:
    no thread's builder, file name or repetition reaches another's result."""
    alone = {name: _report(text, f"{name}.fxr") for name, text in TEXTS.items()}
    found: list[tuple[str, str]] = []

    def parse_all(thread: int) -> None:
        for round_ in range(5):
            for name, text in TEXTS.items():
                filename = f"{name}-{thread}-{round_}.fxr"
                found.append((name, _report(text, filename).replace(filename, f"{name}.fxr")))

    threads = [threading.Thread(target=parse_all, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 4 * 5 * len(TEXTS)
    assert [report for name, report in found if report != alone[name]] == []


def test_a_syntax_error_in_an_included_file_is_reported_at_its_own_line_and_the_includer_loads_once_fixed(
        tmp_path: Path) -> None:
    """A load whose include fails to parse reports the included file's line and column; the same load after
    the file is fixed gives the including file's rules and the included one's."""
    included, including = tmp_path / "bad.fxr", tmp_path / "main.fxr"
    included.write_text("rule inner: torch.neg(x => x\n")
    including.write_text('include "bad.fxr"\nrule outer: torch.neg(torch.neg(x)) => x\n')
    with pytest.raises(FxrError) as caught:
        fxrules.load(including)
    assert str(caught.value).splitlines()[0] == f"{included}:1:25: error: expected a closing ')'"
    included.write_text("rule inner: torch.abs(torch.abs(x)) => torch.abs(x)\n")
    assert [rule.name for rule in fxrules.load(including)] == ["inner", "outer"]
