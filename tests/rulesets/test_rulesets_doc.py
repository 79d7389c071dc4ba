"""``docs/rulesets.md`` documents every bundled rule, and nothing else, so it cannot go stale.

* The doc has one section per bundled ruleset (``## `algebra.fxr`: ...``) with a table of one row per
  rule, in file order: every rule of the ruleset is documented in its own section, exactly once, and
  every documented name is a rule of that ruleset.
* The conditions column says **metadata** exactly when the rule needs shape metadata (a tensor type, or a
  guard that reads tensor attributes), ``where`` exactly when it has a guard, and names its
  ``@tolerance`` and ``@finite_inputs`` decorators.
* The rule counts the doc gives (per section, and the ``fxrules verify`` summary line; also the count in
  ``docs/language.md``) are the real ones.
* What the doc says fires on the real models is the table of ``tests/rulesets/test_real_models.py`` (read from its
  source, so the models are not built here).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import fxrules
from fxrules.lang.bundled import ruleset_names
from fxrules.lang.ir import (
    AttrType,
    GuardAttr,
    GuardBinary,
    GuardBool,
    GuardCall,
    GuardCompare,
    GuardConst,
    GuardExpr,
    GuardIndex,
    GuardName,
    GuardSeq,
    GuardUnary,
    ModuleType,
    Rule,
    TensorType,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "rulesets.md"
LANGUAGE = REPO / "docs" / "language.md"
REAL_MODELS = REPO / "tests" / "rulesets" / "test_real_models.py"

#: How the doc names the models of tests/models.py.
MODEL_NAMES = {
    "bert": "BERT", "gpt2": "GPT-2", "t5": "T5", "llama": "Llama", "vit": "ViT",
    "transformer_encoder_layer": "TransformerEncoderLayer", "multihead_attention": "MultiheadAttention",
    "cnn": "CNN",
}

_SECTION = re.compile(r"^## `(\w+\.fxr)`", re.MULTILINE)
_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # `a \| b` inside a cell is one cell


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in _CELL_SPLIT.split(line.strip())[1:-1]]


def _rows(text: str) -> list[list[str]]:
    """The body rows of the Markdown tables in ``text`` (header and separator rows left out)."""
    rows = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        if index + 1 < len(lines) and set(lines[index + 1]) <= set("|- ") and lines[index + 1].startswith("|"):
            continue  # the header row
        rows.append(_cells(line))
    return rows


def doc_sections() -> dict[str, str]:
    """The text of each ruleset's section, by ruleset name."""
    text = DOC.read_text(encoding="utf-8")
    matches = list(_SECTION.finditer(text))
    names = [match.group(1) for match in matches]
    assert len(names) == len(set(names)), f"a ruleset has two sections: {names}"
    sections = {}
    for match in matches:
        end = text.find("\n## ", match.end())
        sections[match.group(1)] = text[match.start(): end if end != -1 else len(text)]
    return sections


def documented_rules(section: str) -> list[tuple[str, list[str]]]:
    """(rule name, cells) for each row of a ruleset's table."""
    found = []
    for cells in _rows(section):
        name = re.fullmatch(r"`(\w+)`", cells[0])
        assert name is not None, f"the first cell of a rule row must be the rule's name in backticks: {cells}"
        assert len(cells) == 4, f"rule rows are: rule | rewrites | conditions | fires on: {cells}"
        found.append((name.group(1), cells))
    return found


def bundled_rules(ruleset: str) -> list[Rule]:
    return list(fxrules.load(ruleset))


def real_model_table() -> dict[str, dict[str, dict[str, int]]]:
    """``EXPECTED`` of tests/rulesets/test_real_models.py: model -> ruleset -> {rule: times fired}."""
    tree = ast.parse(REAL_MODELS.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "EXPECTED":
            assert node.value is not None
            return ast.literal_eval(node.value)
    raise AssertionError("tests/rulesets/test_real_models.py has no EXPECTED table")


# ---------------------------------------------------------------- which rules the doc documents where


def test_the_doc_has_a_section_for_each_bundled_ruleset_and_no_other() -> None:
    assert sorted(doc_sections()) == sorted(ruleset_names())
    assert "prelude.fxr" not in doc_sections()


@pytest.mark.parametrize("ruleset", ruleset_names())
def test_section_documents_every_rule_of_its_ruleset_once_in_file_order(ruleset: str) -> None:
    documented = [name for name, _ in documented_rules(doc_sections()[ruleset])]
    assert documented == [rule.name for rule in bundled_rules(ruleset)]


def test_every_documented_rule_is_a_bundled_rule_of_that_section() -> None:
    for ruleset, section in doc_sections().items():
        names = {rule.name for rule in bundled_rules(ruleset)}
        missing = [name for name, _ in documented_rules(section) if name not in names]
        assert not missing, f"documented under {ruleset} but not rules of it: {missing}"


def test_no_rule_is_documented_in_another_section() -> None:
    sections = doc_sections()
    for ruleset in ruleset_names():
        own = {rule.name for rule in bundled_rules(ruleset)}
        for other, section in sections.items():
            if other != ruleset:
                elsewhere = own & {name for name, _ in documented_rules(section)}
                assert not elsewhere, f"rules of {ruleset} documented under {other}: {sorted(elsewhere)}"


def test_every_rule_name_mentioned_in_backticks_exists() -> None:
    """Rule names in the prose and the model table (`sdpa_div`, ...) are real rules too."""
    every_rule = {rule.name for ruleset in ruleset_names() for rule in bundled_rules(ruleset)}
    text = DOC.read_text(encoding="utf-8")
    mentioned = set(re.findall(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`", text))
    not_rules = {"example_inputs", "scaled_dot_product_attention", "track_running_stats", "num_users",
                 "is_computed", "is_mutated", "is_static", "inverse_permutation", "broadcasts_to",
                 "static_shape", "static_size", "fold_conv_bn", "fold_conv_bn_weight", "fold_conv_bn_bias",
                 "matrix_t", "requires_grad", "finite_inputs", "symbolic_trace"}
    unknown = mentioned - every_rule - not_rules
    assert not unknown, f"names in backticks that are neither rules nor known words: {sorted(unknown)}"


# ---------------------------------------------------------------- the counts


def test_section_rule_counts() -> None:
    for ruleset, section in doc_sections().items():
        count = re.search(r"^(\d+) rules\.", section, re.MULTILINE)
        assert count is not None, f"the {ruleset} section does not say how many rules it has"
        assert int(count.group(1)) == len(bundled_rules(ruleset))


def test_verify_summary_line_counts_every_bundled_rule() -> None:
    total = sum(len(bundled_rules(ruleset)) for ruleset in ruleset_names())
    text = DOC.read_text(encoding="utf-8")
    assert f"{total} rules: {total} sound, 0 unsound, 0 inconclusive" in text
    command = re.search(r"^fxrules verify (.*)$", text, re.MULTILINE)
    assert command is not None, "the doc does not show the fxrules verify command"
    assert sorted(command.group(1).split()) == sorted(ruleset_names())


def test_the_language_reference_counts_the_bundled_rules_too() -> None:
    total = sum(len(bundled_rules(ruleset)) for ruleset in ruleset_names())
    text = LANGUAGE.read_text(encoding="utf-8")
    assert re.search(rf"reports all {total} sound", text), f"docs/language.md should say all {total} rules are sound"


# ---------------------------------------------------------------- the conditions column


def _guard_nodes(expr: GuardExpr) -> list[GuardExpr]:
    nodes: list[GuardExpr] = [expr]
    children: list[GuardExpr] = []
    if isinstance(expr, GuardAttr | GuardIndex):
        children = [expr.value] + ([expr.index] if isinstance(expr, GuardIndex) else [])
    elif isinstance(expr, GuardCall):
        children = [*expr.args, *([expr.receiver] if expr.receiver is not None else [])]
    elif isinstance(expr, GuardBinary):
        children = [expr.left, expr.right]
    elif isinstance(expr, GuardUnary):
        children = [expr.operand]
    elif isinstance(expr, GuardBool | GuardSeq):
        children = list(expr.values if isinstance(expr, GuardBool) else expr.items)
    elif isinstance(expr, GuardCompare):
        children = [expr.left, *expr.comparators]
    else:
        assert isinstance(expr, GuardName | GuardConst)
    for child in children:
        nodes += _guard_nodes(child)
    return nodes


def _root_name(expr: GuardExpr) -> str | None:
    while isinstance(expr, GuardAttr | GuardIndex):
        expr = expr.value
    return expr.name if isinstance(expr, GuardName) else None


def needs_metadata(rule: Rule) -> bool:
    """A tensor type, or a guard reading tensor attributes of a graph value (not of a module or Attr)."""
    if any(isinstance(t, TensorType) for t in rule.types.values()):
        return True
    if rule.guard is None:
        return False
    not_graph_values = {n for n, t in rule.types.items() if isinstance(t, ModuleType | AttrType)}
    for condition in rule.guard.conditions:
        for node in _guard_nodes(condition):
            if isinstance(node, GuardCall) and node.func == "is_static":
                return True
            base = node.receiver if isinstance(node, GuardCall) else node if isinstance(node, GuardAttr) else None
            if base is not None and _root_name(base) not in not_graph_values:
                return True
    return False


def test_needs_metadata_tells_the_rules_apart() -> None:
    """The check below is only as good as this classification: spot-check it."""
    rules = {rule.name: rule for ruleset in ruleset_names() for rule in bundled_rules(ruleset)}
    assert needs_metadata(rules["clone_single_use"])  # x.requires_grad
    assert needs_metadata(rules["static_size_call"])  # is_static(x)
    assert needs_metadata(rules["view_same_shape"])  # x.shape
    assert not needs_metadata(rules["fold_conv2d_bn"])  # module attributes only
    assert not needs_metadata(rules["permute_inverse"])  # literals only
    assert not needs_metadata(rules["getitem_of_tuple"])  # literal types


@pytest.mark.parametrize("ruleset", ruleset_names())
def test_conditions_column_matches_the_rule(ruleset: str) -> None:
    rows = dict(documented_rules(doc_sections()[ruleset]))
    for rule in bundled_rules(ruleset):
        conditions = rows[rule.name][2]
        assert ("metadata" in conditions) == needs_metadata(rule), f"{rule.name}: metadata in {conditions!r}"
        assert ("where" in conditions) == (rule.guard is not None), f"{rule.name}: guard in {conditions!r}"
        assert ("@finite_inputs" in conditions) == rule.finite_inputs, f"{rule.name}: {conditions!r}"
        assert ("@tolerance" in conditions) == (rule.tolerance is not None), f"{rule.name}: {conditions!r}"
        if rule.tolerance is not None:
            written = re.search(r"@tolerance\(atol=([^,]+), rtol=([^)]+)\)", conditions)
            assert written is not None, f"{rule.name}: write the tolerance out in {conditions!r}"
            assert (float(written.group(1)), float(written.group(2))) == (rule.tolerance.atol, rule.tolerance.rtol)
        if conditions == "—":
            assert not rule.types and rule.guard is None and not rule.finite_inputs and rule.tolerance is None


# ---------------------------------------------------------------- the real models


def _fired_on(table: dict[str, dict[str, dict[str, int]]], ruleset: str, rule: str) -> list[str]:
    return [MODEL_NAMES[model] for model, rulesets in table.items() if rulesets.get(ruleset, {}).get(rule)]


def test_model_names_cover_the_real_model_table() -> None:
    assert sorted(real_model_table()) == sorted(MODEL_NAMES)


@pytest.mark.parametrize("ruleset", ruleset_names())
def test_fires_on_column_is_the_real_model_table(ruleset: str) -> None:
    table = real_model_table()
    for name, cells in documented_rules(doc_sections()[ruleset]):
        documented = [] if cells[3] == "—" else [m.strip() for m in cells[3].split(",")]
        assert documented == _fired_on(table, ruleset, name), f"{ruleset}::{name}"


def test_model_table_is_the_real_model_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## On real models", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in section.splitlines() if line.startswith("| model |"))
    rulesets = [cell.strip("`") for cell in _cells(header)[2:]]
    assert sorted(rulesets) == sorted(ruleset_names())
    documented = {}
    for cells in _rows(section):
        documented[cells[0]] = {
            ruleset: [] if cell == "—" else re.findall(r"`(\w+)`", cell)
            for ruleset, cell in zip(rulesets, cells[2:], strict=True)
        }
    expected = {
        MODEL_NAMES[model]: {ruleset: sorted(table[ruleset]) for ruleset in rulesets}
        for model, table in real_model_table().items()
    }
    assert {model: {r: sorted(names) for r, names in row.items()} for model, row in documented.items()} == expected
