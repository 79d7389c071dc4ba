"""Loading rule files: includes read once per load, unreadable files as located errors, parsed text including
bundled rulesets only, families declared once however often their file is included, and a load-time loop check
whose cost grows linearly with the number of rules."""

from __future__ import annotations

import gc
import os
import time
import warnings
from pathlib import Path

import pytest

import fxrules
from fxrules import FxrLoadError, FxrUsageError
from fxrules.cli import main


def _diamonds(root: Path, levels: int) -> Path:
    """``levels`` stacked diamonds: each level includes four files, each of which includes the next level,
    so the last file is reached along 4**levels include paths."""
    (root / f"d{levels}.fxr").write_text("family twice = torch.neg\nrule leaf: twice(twice(x)) => x\n")
    for level in range(levels - 1, -1, -1):
        for side in "pqrs":
            (root / f"{side}{level}.fxr").write_text(f'include "d{level + 1}.fxr"\n')
        (root / f"d{level}.fxr").write_text("".join(f'include "{side}{level}.fxr"\n' for side in "pqrs"))
    return root / "d0.fxr"


def test_a_file_reached_along_a_million_include_paths_is_loaded_once(tmp_path: Path) -> None:
    """Ten stacked include diamonds (4**10 paths to the last file) load at once: each file is read,
    parsed and resolved once, its rule and family counted once."""
    top = _diamonds(tmp_path, 10)
    started = time.perf_counter()
    ruleset = fxrules.load(top)
    assert time.perf_counter() - started < 2.0
    assert [rule.name for rule in ruleset] == ["leaf"]


def test_an_error_in_a_file_included_twice_is_reported_once(tmp_path: Path) -> None:
    """A diamond whose shared file has an error shows that error once, not once per include path."""
    (tmp_path / "shared.fxr").write_text("rule bad: torch.reluu(x) => x\n")
    (tmp_path / "left.fxr").write_text('include "shared.fxr"\n')
    (tmp_path / "right.fxr").write_text('include "shared.fxr"\n')
    (tmp_path / "top.fxr").write_text('include "left.fxr"\ninclude "right.fxr"\n')
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "top.fxr")
    assert [(str(d.span), d.message) for d in info.value.diagnostics] == [
        (f"{tmp_path / 'shared.fxr'}:1:17", "unknown target 'torch.reluu'")]


NOT_UTF8 = b"rule a: torch.relu(x) => x\n# caf\xe9 au lait\n"


def test_a_file_that_is_not_utf8_is_an_error_at_its_first_bad_byte(tmp_path: Path) -> None:
    """Latin-1 text: the error names the byte, says UTF-8 is expected, and points at the byte's column."""
    path = tmp_path / "latin1.fxr"
    path.write_bytes(NOT_UTF8)
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(path)
    assert str(info.value) == (
        f"{path}:2:6: error: byte 0xe9 is not UTF-8 (invalid continuation byte): rule files must be UTF-8\n"
        "    # caf\ufffd au lait\n"
        "         ^\n"
        "  hint: save the file as UTF-8")


def test_an_included_file_that_is_not_utf8_is_an_error_in_that_file(tmp_path: Path) -> None:
    (tmp_path / "latin1.fxr").write_bytes(NOT_UTF8)
    (tmp_path / "top.fxr").write_text('rule b: torch.neg(x) => x\ninclude "latin1.fxr"\n')
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "top.fxr")
    assert [(str(d.span), d.message) for d in info.value.diagnostics] == [
        (f"{tmp_path / 'latin1.fxr'}:2:6",
         "byte 0xe9 is not UTF-8 (invalid continuation byte): rule files must be UTF-8")]


def test_fxrules_check_reports_a_file_that_is_not_utf8_without_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.fxr"
    path.write_bytes(NOT_UTF8)
    assert main(["check", str(path)]) == 1
    captured = capsys.readouterr()
    assert f"{path}:2:6: error: byte 0xe9 is not UTF-8" in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == f"{path}: 1 error\n"


def test_a_lone_surrogate_in_parsed_text_is_an_error_at_its_place() -> None:
    """A str may hold a lone surrogate, which is no character: shown as U+FFFD, the caret under it."""
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse("rule a: torch.relu(x) => x\nrule b: x + 0 => x  # \ud800 here\n", "s.fxr")
    assert str(info.value) == (
        "s.fxr:2:23: error: lone surrogate U+D800 is not a character: rule text must be valid Unicode\n"
        "    rule b: x + 0 => x  # \ufffd here\n"
        "                          ^")


def test_an_include_name_too_long_for_the_file_system_is_an_error_at_the_quoted_name(tmp_path: Path) -> None:
    name = "a" * 300 + ".fxr"
    (tmp_path / "top.fxr").write_text(f'rule r: torch.neg(x) => x\ninclude "{name}"\n')
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "top.fxr")
    assert [(str(d.span), d.message) for d in info.value.diagnostics] == [
        (f"{tmp_path / 'top.fxr'}:2:9",
         f"cannot read included file '{'a' * 40}...{'a' * 36}.fxr (304 characters)': File name too long")]


def test_an_included_directory_is_an_error_at_the_quoted_name(tmp_path: Path) -> None:
    (tmp_path / "rules.fxr").mkdir()
    (tmp_path / "top.fxr").write_text('include "rules.fxr"\n')
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "top.fxr")
    assert str(info.value) == (
        f"{tmp_path / 'top.fxr'}:1:9: error: cannot read included file 'rules.fxr': Is a directory\n"
        '    include "rules.fxr"\n'
        "            ^")



def test_an_include_chain_deeper_than_the_limit_is_an_error_at_the_include_that_goes_over(tmp_path: Path) -> None:
    """Each file including the next, 500 deep: a load error naming the limit at the include that exceeds it,
    not a message about nested expressions from Python's recursion limit."""
    for index in range(500):
        (tmp_path / f"c{index}.fxr").write_text(f'include "c{index + 1}.fxr"\n')
    (tmp_path / "c500.fxr").write_text("rule r: torch.neg(x) => x\n")
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "c0.fxr")
    assert [(str(d.span), d.message) for d in info.value.diagnostics] == [
        (f"{tmp_path / 'c63.fxr'}:1:1", "includes are nested more than 64 files deep")]
    assert [r.name for r in fxrules.load(tmp_path / "c437.fxr").rules] == ["r"]

def test_calls_nested_deeper_than_python_can_read_are_an_error_saying_so() -> None:
    """Nesting that exhausts Python's recursion while the syntax tree is built, or while the rule is resolved
    (which of the two depends on how deep the caller's stack already is), is reported as nesting, not as an
    unreadable literal quoting Python's RecursionError."""
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse("rule deep:\n    x.reshape(" + "operator.neg(" * 400 + "1" + ")" * 400 + ") => x\n")
    assert [d.message for d in info.value.diagnostics] in (
        ["expressions are nested too deeply to read"], ["rule deep nests expressions too deeply to resolve"])

def test_an_included_fifo_is_an_error_not_a_wait_for_a_writer(tmp_path: Path) -> None:
    """A named pipe called x.fxr has no end until someone writes to it: including it is refused at once
    (as is any file that is not a regular file), not a load that blocks forever."""
    os.mkfifo(tmp_path / "pipe.fxr")
    (tmp_path / "top.fxr").write_text('include "pipe.fxr"\n')
    started = time.monotonic()
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "top.fxr")
    assert time.monotonic() - started < 5
    assert [(str(d.span), d.message) for d in info.value.diagnostics] == [
        (f"{tmp_path / 'top.fxr'}:1:9", "cannot read included file 'pipe.fxr': not a regular file")]

def test_an_include_name_no_file_can_have_is_not_found_and_shown_escaped(tmp_path: Path) -> None:
    """A NUL (written as the escape \\0) names no file; the message shows it escaped."""
    (tmp_path / "top.fxr").write_text('include "a\\0.fxr"\n')
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "top.fxr")
    assert [(str(d.span), d.message) for d in info.value.diagnostics] == [
        (f"{tmp_path / 'top.fxr'}:1:1", "included file 'a\\x00.fxr' not found")]


@pytest.mark.parametrize(("make", "reason"), [
    (lambda root: root / ("b" * 300 + ".fxr"), "File name too long"),
    (lambda root: (root / "rules.fxr").mkdir() or root / "rules.fxr", "Is a directory"),
    (lambda root: os.mkfifo(root / "pipe.fxr") or root / "pipe.fxr", "not a regular file"),
])
def test_loading_a_path_that_cannot_be_read_is_a_usage_error(tmp_path: Path, make, reason: str) -> None:
    path = make(tmp_path)
    with pytest.raises(FxrUsageError, match=f"^cannot read rule file '.*': {reason}$"):
        fxrules.load(path)


def _parse_seconds(text: str) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.process_time()  # CPU time: other processes on a shared machine do not count
        fxrules.parse(text, "many.fxr")
        return time.process_time() - started


def _chain(count: int, offset: int) -> str:
    """Rules that all anchor at ``*``, each replacement a ``*`` another rule's pattern nearly matches."""
    return "".join(f"rule r{i}: torch.relu(x) * {i + offset} => torch.relu(x) * {i + offset + 1}\n"
                   for i in range(count))


def test_the_loop_check_grows_linearly_with_the_rules() -> None:
    """2,000 rules sharing one anchor cost about four times 500 (a check of every rule against every
    replacement cost sixteen times as much)."""
    _parse_seconds(_chain(50, 10**6))  # imports and caches warm
    small = min(_parse_seconds(_chain(500, 10**5 * k)) for k in (1, 2))
    large = _parse_seconds(_chain(2000, 0))
    assert large / small < 8, (small, large)


def test_loop_warnings_on_a_small_set() -> None:
    """Self-matching rules and pairs that undo each other, through families, overload packets, alternatives
    and commutative operands; rules whose replacement nothing anchors at, or whose literal differs, do not
    warn."""
    text = (
        "rule grow: x * 2 => (x * 2) * 1\n"
        "rule to_sigmoid: torch.relu(x) => torch.sigmoid(x)\n"
        "rule to_relu: torch.sigmoid(x) => torch.relu(x)\n"
        "rule spell: relu(x) => F.relu(x)\n"
        "rule swap: torch.add(x, y) => torch.add(y, x)\n"
        "rule to_aten: torch.neg(x) => aten.neg.default(x)\n"
        "rule from_aten: aten.neg(x) => torch.neg(x)\n"
        "rule either: torch.exp(x) | torch.tanh(x) => torch.tanh(x)\n"
        "rule other_literal: x - 3 => x - 4\n"
        "rule inert: torch.abs(x) => x.abs()\n"
    )
    with pytest.warns(fxrules.FxrLoopWarning):
        ruleset = fxrules.parse(text, "loops.fxr")
    assert [d.message for d in ruleset.warnings] == [
        "rule grow: its pattern matches its own replacement, so it may fire forever",
        "rules to_relu and to_sigmoid undo each other, so they may fire forever",
        "rule spell: its pattern matches its own replacement, so it may fire forever",
        "rule swap: its pattern matches its own replacement, so it may fire forever",
        "rules from_aten and to_aten undo each other, so they may fire forever",
        "rule either: its pattern matches its own replacement, so it may fire forever",
    ]


def test_loop_warnings_see_the_pattern_nodes_a_replacement_reuses_and_the_level_its_pattern_sets() -> None:
    """A replacement that gives back a node its pattern named (``return y``) is checked as that node, and a
    rule whose pattern is aten-level emits its families as aten operators, where aten patterns match them."""
    text = (
        "rule unwrap:\n"
        "    pattern:\n"
        "        y = torch.relu(x)\n"
        "        return torch.neg(y)\n"
        "    replace:\n"
        "        return y\n"
        "rule wrap: torch.relu(x) => torch.neg(torch.relu(x))\n"
        "rule to_tanh: aten.sigmoid.default(x) => tanh(x)\n"
        "rule to_sigmoid: aten.tanh.default(x) => sigmoid(x)\n"
    )
    with pytest.warns(fxrules.FxrLoopWarning):
        ruleset = fxrules.parse(text, "reuse.fxr")
    assert [d.render() for d in ruleset.warnings] == [
        "reuse.fxr:1:6: warning: rules unwrap and wrap undo each other, so they may fire forever\n"
        "  hint: wrap is at reuse.fxr:7:6",
        "reuse.fxr:7:6: warning: rule wrap: its pattern matches its own replacement, so it may fire forever\n"
        "  hint: apply stops at max_passes with an error",
        "reuse.fxr:9:6: warning: rules to_sigmoid and to_tanh undo each other, so they may fire forever\n"
        "  hint: to_tanh is at reuse.fxr:8:6",
    ]


# ---------------------------------------------------------------- includes and families

@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "dot-dot"])
def test_an_include_in_parsed_text_is_looked_up_among_the_bundled_rulesets_only(relative: bool,
                                                                                 tmp_path: Path) -> None:
    """Text given to ``parse`` has no directory: its includes are bundled names, and a path (absolute, or
    climbing out of the rulesets folder with ``..``) reaches no .fxr file on disk."""
    outside = tmp_path / "anywhere.fxr"
    outside.write_text("rule outside: torch.neg(x) => x\n", encoding="utf-8")
    path = "../" * 40 + str(outside).lstrip("/") if relative else str(outside)
    with pytest.raises(FxrLoadError, match="not found"):
        fxrules.parse(f'include "{path}"\n')


def test_an_include_through_a_symlink_to_a_non_fxr_file_is_refused(tmp_path: Path) -> None:
    """'An include must name a .fxr file': a link named .fxr to another file is refused without reading
    it, so no line of that file appears in the error."""
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2\n", encoding="utf-8")
    (tmp_path / "link.fxr").symlink_to(secret)
    main = tmp_path / "main.fxr"
    main.write_text('include "link.fxr"\n', encoding="utf-8")
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(main)
    assert "hunter2" not in str(info.value)


def test_a_family_file_included_twice_through_two_paths_loads(tmp_path: Path) -> None:
    """A diamond of includes reaches the shared file twice; its family declaration is the same one, not
    'declared twice in this file', just as its rules count once."""
    (tmp_path / "shared.fxr").write_text(
        "family myrelu = torch.relu | F.relu\nrule idempotent: myrelu(myrelu(x)) => myrelu(x)\n", encoding="utf-8")
    (tmp_path / "left.fxr").write_text('include "shared.fxr"\n', encoding="utf-8")
    (tmp_path / "right.fxr").write_text('include "shared.fxr"\n', encoding="utf-8")
    top = tmp_path / "top.fxr"
    top.write_text('include "left.fxr"\ninclude "right.fxr"\n', encoding="utf-8")
    assert [rule.name for rule in fxrules.load(top)] == ["idempotent"]


def test_a_family_declared_twice_in_one_file_is_still_an_error() -> None:
    with pytest.raises(FxrLoadError, match="family 'f' is declared twice in this file"):
        fxrules.parse("family f = torch.relu\nfamily f = torch.neg\n")


def test_a_loop_warning_points_at_the_line_that_loaded_the_rules() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fxrules.parse("rule grows: torch.relu(x) => torch.relu(torch.relu(x))\n", filename="grows.fxr")
    [warning] = [w for w in caught if issubclass(w.category, fxrules.FxrLoopWarning)]
    assert warning.filename == __file__


@pytest.mark.parametrize("enabled", [True, False])
def test_load_and_parse_leave_the_garbage_collector_as_they_found_it_error_or_not(
        tmp_path: Path, enabled: bool) -> None:
    """Loading pauses automatic garbage collection (it allocates much and frees little) and resumes it only
    if it was on: a caller that turned it off keeps it off."""
    good, bad = tmp_path / "good.fxr", tmp_path / "bad.fxr"
    good.write_text("rule r: torch.relu(torch.relu(x)) => torch.relu(x)\n", encoding="utf-8")
    bad.write_text("rule r: torch.relu(torch.relu(x)) => torch.nosuchop(x)\n", encoding="utf-8")
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        assert len(fxrules.load(good)) == 1
        assert gc.isenabled() is enabled
        with pytest.raises(FxrLoadError):
            fxrules.load(bad)
        assert gc.isenabled() is enabled
        with pytest.raises(FxrLoadError):
            fxrules.parse(bad.read_text(encoding="utf-8"))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def _many_rules(count: int) -> str:
    return "".join(f"rule r{i}: torch.relu(torch.relu(x)) * {i} => torch.relu(x) * {i}\n" for i in range(count))


def test_a_load_leaves_the_objects_a_program_froze_frozen() -> None:
    """A program that froze its objects (``gc.freeze``, as a server does before forking) finds them frozen
    after a load, out of every generation."""
    marker: list[object] = []
    marker.append(marker)
    gc.freeze()
    try:
        assert len(fxrules.parse(_many_rules(5), filename="frozen.fxr")) == 5
        assert not any(found is marker for found in gc.get_objects())
    finally:
        gc.unfreeze()


def test_rule_sets_parsed_one_after_another_under_one_name_each_get_their_own_rules_and_warnings() -> None:
    """What a load derives from a rule set (its loop check, its rules' digests) is kept per set object: a set
    parsed after the previous one was dropped, often at the memory that one held, gets its own rules, digest
    and warnings, never the previous set's."""
    digests = set()
    for number in range(40):
        grows = number % 2 == 0
        replacement = "torch.relu(torch.relu(x))" if grows else "x"
        text = f"rule r{number}: torch.relu(torch.relu(x)) => {replacement}\n"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ruleset = fxrules.parse(text, filename="again.fxr")
        assert [rule.name for rule in ruleset] == [f"r{number}"]
        assert [w.message.split(":")[0] for w in ruleset.warnings] == ([f"rule r{number}"] if grows else [])
        assert len(caught) == grows
        digests.add(ruleset.rules[0].digest)
        del ruleset
    assert len(digests) == 40
