"""The load-time loop check warns exactly as the plain check would.

The plain check (:func:`plain_warnings`, the oracle) builds every rule's replacement graph and tries every
rule at every node the engine's index would offer it, then reports a rule that matches its own replacement
and two rules that each match the other's.  ``fxrules.engine.loops`` builds and tries much less (only what
can end in a warning, only where a rule's operations and literals can be); these tests pin that it still
finds every warning the plain check finds, and no other, in the same order, on the bundled rulesets, the
documentation's examples, the generated 500-rule benchmark file and rule files made to sit at the edges of
what it skips.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import pytest
import torch

import fxrules
from fxrules.diagnostics import Diagnostic
from fxrules.engine.loops import loop_warnings
from fxrules.lang.ir import HelperTemplate, ModuleType, OpTemplate, Rule, RuleSet, replacement_templates
from fxrules.match.matcher import Matcher, node_keys
from fxrules.match.skips import Skip, SkipReason
from fxrules.rewrite.standalone import replacement_graph

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- the oracle


def _calls_helper(rule: Rule) -> bool:
    return any(isinstance(t, HelperTemplate) or (isinstance(t, OpTemplate) and isinstance(t.target, HelperTemplate))
               for t in replacement_templates(rule))


def _matching(rule: Rule, ruleset: RuleSet) -> set[str] | None:
    """The rules that match (or are undecided at) some node of ``rule``'s replacement graph; None when it
    cannot be built."""
    modules = {name: torch.nn.Identity() for name, t in rule.types.items() if isinstance(t, ModuleType)}
    try:
        root, graph = replacement_graph(rule, modules, {})
    except Exception:
        return None
    graph.eliminate_dead_code()  # whatever the builder left, the plain check looks at live nodes only
    matcher = Matcher(root)
    found: set[str] = set()
    for node in graph.nodes:
        keys = set(node_keys(root, node))
        for other in ruleset:
            if other.name in found or not keys & set(other.anchor_keys()):
                continue
            try:
                if matcher.match(other, node) is not None:
                    found.add(other.name)
            except Skip as skip:
                if skip.reason in (SkipReason.MISSING_METADATA, SkipReason.GUARD_ERROR):
                    found.add(other.name)
    return found


def plain_warnings(ruleset: RuleSet, no_change: list[Diagnostic]) -> list[str]:
    """The loop warnings of the plain check, rendered; ``no_change``: the check's own `no change` warnings
    (they come first, and a rule warned of there is not also said to match itself)."""
    matches = {}
    for rule in ruleset:
        if not _calls_helper(rule):
            found = _matching(rule, ruleset)
            if found is not None:
                matches[rule.name] = found
    unchanged = {re.match(r"rule (\w+):", w.message).group(1) for w in no_change}  # type: ignore[union-attr]
    by_name = {rule.name: rule for rule in ruleset}
    rendered = [w.render() for w in no_change]
    for name, found in matches.items():
        span = by_name[name].span
        if name in found and name not in unchanged:
            rendered.append(f"{span}: warning: rule {name}: its pattern matches its own replacement, so it may fire "
                            "forever\n  hint: apply stops at max_passes with an error")
        for other in sorted(found - {name}):
            if name < other and name in matches.get(other, set()):
                rendered.append(f"{span}: warning: rules {name} and {other} undo each other, so they may fire "
                                f"forever\n  hint: {other} is at {by_name[other].span}")
    return rendered


def assert_as_plain(ruleset: RuleSet) -> list[str]:
    """The check's warnings on ``ruleset`` equal the oracle's; returns them."""
    checked = list(loop_warnings(ruleset))
    no_change = [w for w in checked if "`no change`" in w.message]
    rendered = [w.render() for w in checked]
    assert rendered == plain_warnings(ruleset, no_change)
    return rendered


def _quietly(text: str, filename: str) -> RuleSet:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fxrules.FxrLoopWarning)
        return fxrules.parse(text, filename)


# ---------------------------------------------------------------- corpora


@pytest.mark.parametrize("path", sorted((REPO / "rulesets").glob("*.fxr")), ids=lambda p: p.name)
def test_the_bundled_rulesets_warn_as_the_plain_check(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fxrules.FxrLoopWarning)
        ruleset = fxrules.load(path)
    assert_as_plain(ruleset)


def _doc_examples() -> list[tuple[str, str]]:
    """Every ```fxr block of the docs that parses, with where it is."""
    found = []
    for doc in sorted((REPO / "docs").glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for block in re.finditer(r"^```fxr\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
            found.append((f"{doc.name}:{text[:block.start()].count(chr(10)) + 1}", block.group(1)))
    return found


def test_the_documented_examples_warn_as_the_plain_check() -> None:
    checked = warned = 0
    for where, text in _doc_examples():
        try:
            ruleset = _quietly(text, where)
        except fxrules.FxrError:  # an example of an error
            continue
        checked += 1
        warned += bool(assert_as_plain(ruleset))
    assert checked >= 30 and warned >= 1, (checked, warned)


def _generated(count: int) -> str:
    spec = importlib.util.spec_from_file_location("bench_load", REPO / "benchmarks" / "bench_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.rule_file(count)
    return text


def test_the_generated_500_rules_warn_as_the_plain_check() -> None:
    rendered = assert_as_plain(_quietly(_generated(500), "r500.fxr"))
    assert [line.split(": warning: ")[1].split(",")[0] for line in rendered] == [
        "rules atan_family_125_of_sinh_131 and sinh_family_150_of_atan_164 undo each other",
        "rule sign_family_300_of_sign_307: its pattern matches its own replacement",
        "rules log10_family_475_of_log2_483 and log2_family_450_of_log10_450 undo each other",
    ]


#: Rule files at the edges of what the check leaves out, and the warnings each gives (the rule, or the pair).
EDGES = {
    "a family emitted as an aten overload is seen at its overload packet": (
        "family fam = aten.sin.default | torch.sin\n"
        "rule a: torch.cos(x) => fam(x)\n"
        "rule b: aten.sin(x) => torch.cos(x)\n", ["a and b"]),
    "a literal tells two rules apart": (
        "rule a: torch.mul(torch.relu(x), 1) => torch.mul(torch.relu(x), 2)\n"
        "rule b: torch.mul(torch.relu(x), 2) => torch.mul(torch.relu(x), 1)\n"
        "rule c: torch.mul(torch.relu(x), 3) => torch.mul(torch.relu(x), 4)\n", ["a and b"]),
    "an operand's literal tells two rules apart": (
        "rule a: torch.relu(torch.mul(x, 3)) => torch.sigmoid(torch.mul(x, 3))\n"
        "rule b: torch.sigmoid(torch.mul(x, 3)) => torch.relu(torch.mul(x, 3))\n"
        "rule c: torch.sigmoid(torch.mul(x, 4)) => torch.relu(torch.mul(x, 4))\n", ["a and b"]),
    "a literal folded from arithmetic is any literal": (
        "rule a: torch.relu(torch.mul(x, 6)) => torch.sigmoid(torch.mul(x, 2 * 3))\n"
        "rule b: torch.sigmoid(torch.mul(x, 6)) => torch.relu(torch.mul(x, 6))\n", ["a and b"]),
    "a replacement's operand is the pattern's node it gives back by name": (
        "rule p:\n"
        "    pattern:\n"
        "        y = torch.neg(x)\n"
        "        return torch.relu(torch.exp(y))\n"
        "    replace:\n"
        "        return torch.exp(y)\n"
        "rule q: torch.exp(torch.neg(x)) => torch.relu(torch.exp(torch.neg(x)))\n", ["p and q", "q"]),
    "an operand whose own operand differs is no match": (
        "rule a: torch.relu(torch.neg(torch.neg(x))) => torch.relu(torch.neg(x))\n"
        "rule b: torch.relu(torch.exp(x)) => torch.relu(torch.neg(x))\n", []),
    "a method chain and its function spelling": (
        "rule a: x.relu().neg() => torch.neg(torch.relu(x))\n"
        "rule b: torch.neg(torch.relu(x)) => x.relu().neg()\n", ["a and b"]),
    "a module capture is a module call in the graph": (
        "rule m:\n"
        "    given:\n"
        "        c: nn.Identity\n"
        "    pattern:\n"
        "        return torch.relu(c(x))\n"
        "    replace:\n"
        "        return torch.relu(c(torch.relu(x)))\n", ["m"]),
    "a random pattern node is left in the graph (dead-code removal keeps it)": (
        "rule a: torch.neg(torch.rand_like(x)) => torch.exp(x)\n"
        "rule b: torch.rand_like(x) => torch.neg(torch.rand_like(x))\n", ["a and b", "b"]),
}


@pytest.mark.parametrize("case", EDGES, ids=list(EDGES))
def test_rule_files_at_the_edges_of_what_is_skipped_warn_as_the_plain_check(case: str) -> None:
    text, expected = EDGES[case]
    rendered = assert_as_plain(_quietly(text, "edge.fxr"))
    said = [re.search(r"warning: rules? (\w+(?: and \w+)?)", line).group(1) for line in rendered]  # type: ignore[union-attr]
    assert said == expected


def test_a_replacement_no_warning_can_come_of_is_neither_built_nor_matched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Of the 500 generated rules, only replacements a rule that could then warn may match are built: not those
    of the idempotent rules (``relu_neg_0: relu(neg(neg(x))) => relu(neg(x))``, whose pattern needs ``neg`` of
    ``neg``) nor of the other rules named so, but for the literal folds (``fold_sub_6``), whose replacement is
    their pattern's computation."""
    from fxrules.engine import loops
    built: list[str] = []
    real = loops.replacement_graph

    def counted(rule: Rule, *args: object, **kwargs: object) -> object:
        built.append(rule.name)
        return real(rule, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loops, "replacement_graph", counted)
    ruleset = _quietly(_generated(500), "r500.fxr")
    built.clear()
    loop_warnings(ruleset)
    assert 0 < len(built) < 100
    assert not [name for name in built if re.fullmatch(r"[a-z0-9]+_[a-z0-9]+_\d+", name)
                and name.split("_")[0] != "fold"]
