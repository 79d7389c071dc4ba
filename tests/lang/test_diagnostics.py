"""Malformed rule files: every problem is named in plain words, at its exact line and column.

Each case is a malformed ``.fxr`` text and the complete list of diagnostics
it must raise, as ``(line, column, message)`` or, where the diagnostic gives
a hint, ``(line, column, message, hint)``.  The expected values are what a
careful user should see: one diagnostic per mistake (no follow-on errors),
the caret under the offending spot, and the wording of docs/language.md
(section 16: ``unknown target 'torch.reluu'`` with ``did you mean 'torch.relu'?``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.fx

import fxrules
from fxrules import FxrError, FxrLoadError, FxrSyntaxError
from fxrules.lang.bundled import ruleset_names
from fxrules.lang.guards import FUNCTION_NAMES as GUARD_FUNCTIONS
from fxrules.lang.parser import fxr_parser

#: One expected diagnostic: (line, column, message) or (line, column, message, hint).
Expected = tuple[int, int, str] | tuple[int, int, str, str | None]

TOP_LEVEL = "expected 'rule', 'use', 'include', 'family' or 'commutative' at the start of a top-level item"
NO_OS = ("'torch.os' is the module 'os', which rule files may not reach", "pass allow=['os'] to use it")
SECTIONS = "(sections are given:, pattern:, where:, replace:, in this order)"
NO_OPERATION = "the pattern has no operation to match: it must call something"
NO_OPERATION_HINT = "a rule's pattern is anchored at an operation, e.g. 'torch.neg(torch.neg(x)) => x'"
UNKNOWN_ROOT_HINT = "add 'use MODULE as NAME' or pass allow=[...]"
BUNDLED = ruleset_names()  # the include hint lists them
GUARD_CALLS = f"guards may call only {', '.join(GUARD_FUNCTIONS)} and the tensor methods .numel(), .size(), .dim()"
PARTLY_BOUND = "bind it in every option of 'A | B', or write one rule per option"
TYPES_HINT = ("types are Tensor[...], int, float, bool, str, Scalar, list, tuple, Node, Attr, or an nn.Module "
              "subclass such as nn.Conv2d")


def diagnostics(error: FxrLoadError) -> list[tuple[int, int, str, str | None]]:
    return [(d.span.line, d.span.column, d.message, d.hint) for d in error.diagnostics]


def assert_diagnostics(error: FxrLoadError, expected: list[Expected]) -> None:
    """Every diagnostic, in order; the hint is compared where the expectation names one."""
    got = diagnostics(error)
    comparable = [g if len(e) == 4 else g[:3] for g, e in zip(got, expected, strict=False)]
    assert len(got) == len(expected) and comparable == [tuple(e) for e in expected], (
        "diagnostics differ:\n  got:      " + "\n            ".join(map(repr, got))
        + "\n  expected: " + "\n            ".join(map(repr, expected))
    )


def load_error(text: str, **kwargs: object) -> FxrLoadError:
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse(text, filename="bad.fxr", **kwargs)  # type: ignore[arg-type]
    return info.value


# ---------------------------------------------------------------- syntax errors

SYNTAX_CASES = [
    pytest.param("rule r: torch.neg(x) =>\n", [(1, 24, "expected an expression after '=>'")],
                 id="nothing-after-arrow"),
    pytest.param("rule r: x =>  # nothing here\n", [(1, 13, "expected an expression after '=>'")],
                 id="nothing-after-arrow-but-a-comment"),
    pytest.param("rule r: neg(x) =>\n\n\n", [(1, 18, "expected an expression after '=>'")],
                 id="nothing-after-arrow-then-blank-lines"),
    pytest.param("rule r: => x\n", [(1, 9, "expected a pattern before '=>'")], id="nothing-before-arrow"),
    pytest.param("rule r: torch.neg(x) x\n", [(1, 22, "expected '=>' between the pattern and the replacement")],
                 id="missing-arrow"),
    pytest.param("rule r: torch.neg(x) -> x\n", [(1, 22, "expected '=>' between the pattern and the replacement")],
                 id="thin-arrow"),
    pytest.param("rule r: x => x y\n", [(1, 16, "expected the end of the line after the replacement")],
                 id="junk-after-replacement"),
    pytest.param("rule r torch.neg(x) => x\n", [(1, 8, "expected ':' after the rule name")], id="missing-colon"),
    pytest.param("rule : torch.neg(x) => x\n", [(1, 6, "expected a rule name after 'rule'")], id="missing-rule-name"),
    pytest.param("ruel r: torch.neg(x) => x\n",
                 [(1, 1, TOP_LEVEL)],
                 id="misspelt-rule-keyword"),
    pytest.param("rule r:\n    neg(x) => x\n    neg(neg(x)) => x\n",
                 [(3, 5, "a one-line rule has one rewrite: start the next one with 'rule NAME:'")],
                 id="indented-one-liner-with-a-second-rewrite"),
    pytest.param("rule r:\n    neg(x) => x\n    where x.ndim == 1\n",
                 [(3, 5, "in a one-line rule, 'where' goes on the same line as the rewrite")],
                 id="indented-one-liner-with-where-below"),
    pytest.param("rule r:\n    neg(x) => x where\n", [(2, 22, "expected an expression after 'where'")],
                 id="indented-one-liner-empty-where"),
    pytest.param('rule r:\n    """Docstring only."""\n',
                 [(2, 26, "expected a rewrite or a pattern: section after the docstring")], id="docstring-only"),
    pytest.param("rule r:\n    pattern:\n        return neg(x)\n    replace:\n        return x\n"
                 "    where:\n        x.ndim == 1\n",
                 [(6, 5, f"'where:' must come before 'replace:' {SECTIONS}")], id="where-after-replace"),
    pytest.param("rule r:\n    pattern:\n        return neg(x)\n    given:\n        x: Tensor\n"
                 "    replace:\n        return x\n",
                 [(4, 5, f"'given:' must come before 'pattern:' {SECTIONS}")], id="given-after-pattern"),
    pytest.param("rule r:\n    pattern:\n        return neg(x)\n    replace:\n        return x\n"
                 "    replace:\n        return x\n",
                 [(6, 5, "a rule has one 'replace:' section")], id="two-replace-sections"),
    pytest.param("rule r:\n    given:\n        x: Tensor\n    pattern:\n        return neg(x)\n",
                 [(5, 22, f"expected 'replace:' after the pattern {SECTIONS}")], id="missing-replace-after-given"),
    pytest.param("rule r:\n    pattern:\n        return neg(x)\n    replace:\n",
                 [(4, 13, "expected an indented block after the section header")], id="empty-replace-at-eof"),
    pytest.param("rule r:\n    pattern:\n        return neg(x)\n    where:\n    replace:\n        return x\n",
                 [(5, 5, "expected an indented block after the section header")], id="empty-where-section"),
    pytest.param("rule r:\n    pattern:\n        neg(x)\n    replace:\n        return x\n",
                 [(3, 12, "expected 'NAME = expression' or 'return ...' in a pattern or replace section")],
                 id="bare-expression-statement"),
    pytest.param("rule r:\n    pattern:\n        return neg(x)\n    replace:\n        return x =>\n",
                 [(5, 18, "expected the end of the line after the statement (one statement per line)")],
                 id="arrow-in-a-block-statement"),
    pytest.param("rule r:\n    given:\n        x Tensor\n    pattern:\n        return neg(x)\n    replace:\n"
                 "        return x\n",
                 [(3, 11, "expected 'NAME: type' in a given: section")], id="declaration-without-colon"),
    pytest.param("rule r:\n    given:\n        x: Tensor[M,, K]\n    pattern:\n        return neg(x)\n"
                 "    replace:\n        return x\n",
                 [(3, 21, "expected a dimension (a name, an integer or '...') or 'dtype=...'")],
                 id="empty-tensor-dimension"),
    pytest.param("rule r: neg(neg(x)\n", [(1, 12, "'(' is never closed")], id="unclosed-paren-at-eof"),
    pytest.param("rule r:\n    pattern:\n        return neg(x\n    replace:\n        return x\n",
                 [(3, 19, "'(' is never closed")], id="unclosed-paren-before-next-section"),
    pytest.param("rule r: torch.neg(x)) => x\n", [(1, 21, "unmatched ')'")], id="unmatched-paren"),
    pytest.param("rule r: torch.neg(x => x\n", [(1, 21, "expected a closing ')'")], id="arrow-inside-parens"),
    pytest.param("rule r: torch.add(x y) => x\n", [(1, 21, "expected ',' between arguments")], id="missing-comma"),
    pytest.param("rule r: torch.sum(x, 1=2) => x\n", [(1, 23, "a keyword argument is written NAME=value")],
                 id="keyword-argument-without-name"),
    pytest.param("rule r: x[1:2:3:4] => x\n", [(1, 16, "a slice has at most three parts, start:stop:step")],
                 id="slice-with-four-parts"),
    pytest.param("rule r: torch.neg(x) => @fold_conv_bn\n",
                 [(1, 38, "expected '(' after the helper's name: helpers are called as @name(...)")],
                 id="helper-without-call"),
    pytest.param("rule r: torch.neg(x) => x where x.ndim = 1\n", [(1, 40, "'=' assigns; compare with '=='")],
                 id="assignment-in-guard"),
    pytest.param("rule r: torch.neg(x) => x where x not y\n",
                 [(1, 39, "expected 'in' after 'not' (as in 'a not in b'; to negate, write 'not a')")],
                 id="not-without-in"),
    pytest.param("rule r: torch.neg(x) => x where x.ndim == 1 and\n", [(1, 48, "expected an expression")],
                 id="dangling-and"),
    pytest.param('include "algebra.fxr\n', [(1, 9, "unterminated string literal")], id="unterminated-string"),
    pytest.param("rule r: torch.neg(x) => x $\n", [(1, 27, "unexpected character '$'")], id="unexpected-character"),
    pytest.param("rule r: x * 01 => x\n",
                 [(1, 13, "leading zeros are not allowed in an integer (write 0x... for hexadecimal)")],
                 id="leading-zero"),
    pytest.param("rule r: neg(x) => x\n    neg(x) => x\n", [(2, 5, "unexpected indentation")],
                 id="unexpected-indentation"),
    pytest.param("rule r:\n        neg(x) => x\n    rule s: neg(x) => x\n",
                 [(3, 5, "this line's indentation does not match any enclosing block")], id="bad-dedent"),
    pytest.param("use\n", [(1, 4, "expected a module name after 'use'")], id="use-without-module"),
    pytest.param("use torch.nn as F as G\n", [(1, 19, "expected a new line after the 'use' item")],
                 id="use-with-two-aliases"),
    pytest.param("include algebra.fxr\n", [(1, 9, "expected a quoted path after 'include'")],
                 id="include-without-quotes"),
    pytest.param("family relu torch.relu | F.relu\n", [(1, 13, "expected 'family NAME = target | target ...'")],
                 id="family-without-equals"),
    pytest.param("family relu = torch.relu, F.relu\n", [(1, 25, "expected 'family NAME = target | target ...'")],
                 id="family-with-commas"),
    pytest.param("commutative torch.add torch.mul\n", [(1, 23, "expected ',' between targets")],
                 id="commutative-without-comma"),
    pytest.param("@tolerance(atol=1e-3)\nuse torch\n", [(2, 1, "expected 'rule' after a decorator")],
                 id="decorator-without-rule"),
    pytest.param("@tolerance\nrule r: torch.neg(x) => x\n",
                 [(1, 11, "expected '(' after the decorator name: decorators are written @name(...)")],
                 id="decorator-without-call"),
]


@pytest.mark.parametrize(("text", "expected"), SYNTAX_CASES)
def test_syntax_error(text: str, expected: list[Expected]) -> None:
    with pytest.raises(FxrSyntaxError) as info:
        fxrules.parse(text, filename="bad.fxr")
    assert_diagnostics(info.value, expected)
    for diagnostic in info.value.diagnostics:
        assert not re.search(r"Token\(|__ANON|_NL|_INDENT|_DEDENT|\$END", diagnostic.message), diagnostic.message


def test_every_grammar_terminal_has_a_written_name() -> None:
    """Punctuation such as '=>' and '**' is a named terminal of grammar/fxr.lark, so the parser's messages and
    expected-token lists never depend on the __ANON_n names Lark generates for unnamed strings."""
    names = {terminal.name for terminal in fxr_parser().terminals}
    assert not [name for name in names if name.startswith("__ANON")]
    assert {"ARROW", "ELLIPSIS", "POW", "EQ", "NE", "LE", "GE", "FLOORDIV"} <= names


# ---------------------------------------------------------------- semantic errors

SEMANTIC_CASES = [
    # -- names that do not resolve
    pytest.param("rule r: torch.reluu(x) => x\n",
                 [(1, 15, "unknown target 'torch.reluu'", "did you mean 'torch.relu'?")],
                 id="unknown-target-in-pattern"),
    pytest.param("rule r: torch.neg(x) => torch.reluu(x)\n",
                 [(1, 31, "unknown target 'torch.reluu'", "did you mean 'torch.relu'?")],
                 id="unknown-target-in-replacement"),
    pytest.param("use torch.nn.functionall as G\n",
                 [(1, 14, "unknown target 'torch.nn.functionall'", "did you mean 'torch.nn.functional'?")],
                 id="unknown-target-in-use"),
    pytest.param("family myrelu = torch.reluu | F.relu\n",
                 [(1, 23, "unknown target 'torch.reluu'", "did you mean 'torch.relu'?")],
                 id="unknown-target-in-family"),
    pytest.param("rule r: rellu(x) => x\n", [(1, 9, "unknown family 'rellu'", "did you mean 'relu'?")],
                 id="unknown-family-did-you-mean"),
    pytest.param("rule r: torch.neg(x) => foo(x)\n",
                 [(1, 25, "unknown family 'foo'", "declare it with 'family NAME = ...'")],
                 id="unknown-family-in-replacement"),
    pytest.param("rule r: torch.neg(x).reluu() => x\n",
                 [(1, 22, "unknown tensor method '.reluu'", "did you mean 'relu'?")],
                 id="unknown-tensor-method"),
    # -- what the pattern binds and what the replacement uses
    pytest.param("rule r: torch.neg(x) => y\n", [(1, 25, "'y' is not bound by the pattern")],
                 id="replacement-name-not-bound"),
    pytest.param("rule r: torch.add(xs, w) => x\n", [(1, 29, "'x' is not bound by the pattern", "did you mean 'xs'?")],
                 id="replacement-name-not-bound-did-you-mean"),
    pytest.param("rule r: torch.add(y, x) | torch.mul(z, x) => x + z\n",
                 [(1, 50, "'z' is bound by only some alternatives of the pattern", PARTLY_BOUND)],
                 id="replacement-name-bound-by-one-alternative"),
    pytest.param("rule r:\n    pattern:\n        return torch.add(y, x) | torch.mul(z, x)\n    where:\n        y > 1\n"
                 "    replace:\n        return x\n",
                 [(5, 9, "'y' is bound by only some alternatives of the pattern", PARTLY_BOUND)],
                 id="guard-name-bound-by-one-alternative"),
    pytest.param("rule r:\n    pattern:\n        m = torch.neg(x)\n        return torch.add(m, x) | torch.mul(x, x)\n"
                 "    replace:\n        return m\n",
                 [(6, 16, "'m' is bound by only some alternatives of the pattern", PARTLY_BOUND)],
                 id="interior-name-bound-by-one-alternative"),
    pytest.param("rule r:\n    given:\n        y: Tensor\n    pattern:\n        return torch.neg(x)\n"
                 "    replace:\n        return x\n",
                 [(3, 9, "'y' is declared in given: but the pattern does not use it")], id="given-capture-unused"),
    pytest.param("rule r:\n    pattern:\n        a = torch.neg(x)\n        a = torch.neg(a)\n        return a\n"
                 "    replace:\n        return x\n",
                 [(4, 9, "'a' is assigned twice")], id="assigned-twice-in-pattern"),
    pytest.param("rule r:\n    pattern:\n        return torch.neg(x)\n    replace:\n        y = torch.relu(x)\n"
                 "        y = torch.relu(y)\n        return y\n",
                 [(6, 9, "'y' is assigned twice")], id="assigned-twice-in-replacement"),
    pytest.param("rule r:\n    pattern:\n        return torch.neg(x), torch.relu(x)\n    replace:\n        return x\n",
                 [(5, 9, "the pattern returns 2 value(s) but the replacement returns 1")], id="return-arity-differs"),
    pytest.param("rule r:\n    pattern:\n        y = torch.neg(x)\n    replace:\n        return x\n",
                 [(3, 9, "the pattern: section has no 'return'")], id="pattern-without-return"),
    pytest.param("rule r: x => x\n", [(1, 9, NO_OPERATION, NO_OPERATION_HINT)], id="pattern-without-operation"),
    # -- types
    pytest.param("rule r:\n    given:\n        x: Tensr\n    pattern:\n        return torch.neg(x)\n"
                 "    replace:\n        return x\n",
                 [(3, 12, "unknown type 'Tensr'", "did you mean 'Tensor'?")], id="unknown-type-did-you-mean"),
    pytest.param("rule r:\n    given:\n        xs: list[Tnesor]\n    pattern:\n        return torch.cat(xs, 0)\n"
                 "    replace:\n        return torch.stack(xs)\n",
                 [(3, 18, "list[...] takes one element type: Tensor or int, float, bool, str, Scalar, dtype, slice",
                   "did you mean 'Tensor'?")], id="misspelt-element-type"),
    pytest.param("rule r:\n    given:\n        xs: tuple[int, int]\n    pattern:\n        return x.view(xs)\n"
                 "    replace:\n        return x\n",
                 [(3, 19, "tuple[...] takes one element type: Tensor or int, float, bool, str, Scalar, dtype, slice")],
                 id="two-element-types"),
    pytest.param("rule r:\n    given:\n        b: int | None\n    pattern:\n        return F.linear(x, w, b)\n"
                 "    replace:\n        return x\n",
                 [(3, 16, "only a Tensor type can be '| None' (other literals are matched by value: write None in "
                          "the pattern)")], id="or-none-on-a-literal-type"),
    pytest.param("rule r:\n    given:\n        m: Foo\n    pattern:\n        return m(x)\n"
                 "    replace:\n        return x\n",
                 [(3, 12, "unknown type 'Foo'", TYPES_HINT)], id="unknown-type"),
    pytest.param("rule r:\n    given:\n        m: torch.relu\n    pattern:\n        return m(x)\n"
                 "    replace:\n        return x\n",
                 [(3, 12, "unknown type 'torch.relu'", TYPES_HINT)], id="type-that-is-a-function"),
    pytest.param("rule r:\n    given:\n        m: nn.Conv22\n    pattern:\n        return m(x)\n"
                 "    replace:\n        return x\n",
                 [(3, 15, "unknown target 'nn.Conv22'", "did you mean 'nn.Conv2d'?")], id="unknown-module-type"),
    pytest.param("rule r:\n    given:\n        x: Tensor[dtype=flaot32]\n    pattern:\n        return torch.neg(x)\n"
                 "    replace:\n        return x\n",
                 [(3, 25, "unknown dtype 'flaot32'", "did you mean 'float32'?")], id="unknown-dtype"),
    pytest.param("rule r:\n    given:\n        x: Tensor[dtype=torch.flaot32]\n    pattern:\n"
                 "        return torch.neg(x)\n    replace:\n        return x\n",
                 [(3, 31, "unknown target 'torch.flaot32'", "did you mean 'torch.float32'?")],
                 id="unknown-qualified-dtype"),
    pytest.param("rule r:\n    given:\n        x: Tensor[dtype=relu]\n    pattern:\n        return torch.neg(x)\n"
                 "    replace:\n        return x\n",
                 [(3, 25, "'relu' is not a dtype")], id="dtype-that-is-not-a-dtype"),
    # -- rules, files, includes
    pytest.param("rule r: torch.neg(x) => x\nrule r: torch.relu(x) => x\n",
                 [(2, 6, "duplicate rule name 'r' (first defined at bad.fxr:1:6)",
                   "rule names key the report: give each rule its own")], id="duplicate-rule-name"),
    pytest.param('include "nowhere.fxr"\n',
                 [(1, 1, "included file 'nowhere.fxr' not found",
                   f"looked next to bad.fxr and among the bundled rulesets: {BUNDLED}")],
                 id="include-not-found"),
    pytest.param('include "algebra.txt"\n', [(1, 1, "include must name a .fxr file, not 'algebra.txt'")],
                 id="include-not-fxr"),
    pytest.param("@memo(1)\nrule r: torch.neg(x) => x\n",
                 [(1, 1, "unknown decorator '@memo'",
                   "the decorators are @tolerance(atol=..., rtol=...), @finite_inputs() and @no_grad_check()")],
                 id="unknown-decorator"),
    pytest.param("rule r: nn.ReLU(x) => x\n",
                 [(1, 9, "'nn.ReLU' is a module class, not a call",
                   "declare 'm: nn.ReLU' in given: and write m(x), or use the family 'relu'")],
                 id="module-class-called"),
    # -- forms allowed in patterns only
    pytest.param("rule r: torch.neg(x) => ...\n",
                 [(1, 25, "'...' may only stand as the last argument of a call in a pattern")],
                 id="ellipsis-as-replacement"),
    pytest.param("rule r: torch.neg(x) => torch.sum(x, ...)\n", [(1, 38, "'...' may only appear in a pattern")],
                 id="ellipsis-in-replacement-call"),
    pytest.param("rule r: torch.cat(..., x) => x\n",
                 [(1, 19, "'...' may only stand as the last argument of a call in a pattern")],
                 id="ellipsis-not-last"),
    pytest.param("rule r: torch.neg(x) => x | x\n", [(1, 25, "alternatives 'A | B' may only appear in a pattern")],
                 id="alternatives-in-replacement"),
    pytest.param("rule r: torch.neg(x) => _\n",
                 [(1, 25, "'_' matches anything in a pattern; a replacement cannot build it")],
                 id="wildcard-in-replacement"),
    pytest.param("rule r: @fold_conv_bn(x) => x\n",
                 [(1, 9, "helper '@fold_conv_bn' may only be called in a replacement")], id="helper-in-pattern"),
    pytest.param("rule r: torch.neg(x)(1) => x\n",
                 [(1, 9, "only functions, methods, modules and families can be called here")],
                 id="calling-a-call-result"),
    pytest.param("rule r: not torch.neg(x) => x\n", [(1, 9, "'not' may only appear in a guard")],
                 id="not-in-pattern"),
    pytest.param("rule r: torch.neg(x) => x and x\n", [(1, 25, "'and' may only appear in a guard")],
                 id="and-in-replacement"),
    pytest.param("rule r: torch.neg(x) < y => x\n", [(1, 9, "a comparison may only appear in a guard")],
                 id="comparison-in-pattern"),
    # -- guards
    pytest.param("rule r: torch.neg(x) => x where y > 0\n",
                 [(1, 33, "the guard reads 'y', which the pattern does not bind")], id="guard-reads-unbound-name"),
    pytest.param("rule r: torch.neg(x) => x where x.ndim == 1 and K > 1\n",
                 [(1, 49, "the guard reads 'K', which the pattern does not bind")], id="guard-reads-undeclared-dim"),
    pytest.param("rule r: torch.neg(x) => x where x._cdata > 0\n",
                 [(1, 33, "'._cdata': guards may not read private or dunder attributes")],
                 id="guard-reads-private-attribute"),
    pytest.param("rule r: torch.neg(x) => x where x.eval()\n",
                 [(1, 33, GUARD_CALLS)], id="guard-calls-a-method"),
    pytest.param("rule r: torch.neg(x) => x where ...\n", [(1, 33, "this expression is not available in guards")],
                 id="ellipsis-in-guard"),
]


@pytest.mark.parametrize(("text", "expected"), SEMANTIC_CASES)
def test_semantic_error(text: str, expected: list[Expected]) -> None:
    assert_diagnostics(load_error(text), expected)


@pytest.mark.parametrize(("text", "fired"), [
    pytest.param("rule r: torch.mul(x, torch.neg(y)) | torch.mul(torch.neg(y), x) => torch.neg(torch.mul(x, y))\n",
                 2, id="bound-by-every-alternative"),
    pytest.param("rule r:\n    pattern:\n        m = torch.neg(y) | torch.abs(z)\n        return torch.sub(m, z)\n"
                 "    replace:\n        return torch.add(m, torch.neg(z))\n",
                 1, id="bound-outside-the-alternatives"),
])
def test_a_name_every_match_binds_may_be_used(text: str, fired: int) -> None:
    """A name bound by each option of ``A | B``, or outside it (an interior name of the choice itself), loads,
    and each match's replacement uses what that match bound."""
    def program(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mul(a, torch.neg(b)) + torch.mul(torch.neg(b), a) + torch.sub(torch.abs(a), a)

    gm = torch.fx.symbolic_trace(program)
    a, b = torch.randn(3), torch.randn(3)
    report = fxrules.apply(gm, fxrules.parse(text, filename="ok.fxr"))
    assert report.counts() == {"r": fired}
    torch.testing.assert_close(gm(a, b), program(a, b))


# ---------------------------------------------------------------- safety: a rule file is data, never code

SAFETY_CASES = [
    pytest.param("use os\n", [(1, 5, "unknown name 'os'", "pass allow=['os'] to use it")], id="use-os"),
    pytest.param("use builtins\n", [(1, 5, "unknown name 'builtins'", "pass allow=['builtins'] to use it")],
                 id="use-builtins"),
    pytest.param("use torch.os as o\n",
                 [(1, 11, *NO_OS)],
                 id="use-os-through-torch"),
    pytest.param("rule r: os.system(x) => x\n", [(1, 9, "unknown name 'os'", UNKNOWN_ROOT_HINT)], id="os-system"),
    pytest.param("rule r: builtins.eval(x) => x\n", [(1, 9, "unknown name 'builtins'", UNKNOWN_ROOT_HINT)],
                 id="builtins-eval"),
    pytest.param("rule r: torch.os.system(x) => x\n",
                 [(1, 15, *NO_OS)],
                 id="os-system-through-torch"),
    pytest.param("rule r: __import__(x) => x\n", [(1, 9, "'__import__': dunder names are not allowed in rule files")],
                 id="dunder-import"),
    pytest.param("rule r: torch.__builtins__(x) => x\n",
                 [(1, 15, "'torch.__builtins__': dunder names are not allowed in rule files")],
                 id="torch-dunder-builtins"),
    pytest.param("rule r: torch.neg(x.__class__) => torch.neg(x)\n",
                 [(1, 19, "'.__class__': private and dunder attributes are not allowed")],
                 id="dunder-attribute-in-pattern"),
    pytest.param("rule r: torch.neg(x) => torch.neg(x).__class__\n",
                 [(1, 25, "'.__class__': private and dunder attributes are not allowed")],
                 id="dunder-attribute-in-replacement"),
    pytest.param('rule r: torch.neg(x) => getattr(x, "__class__")\n',
                 [(1, 25, "'.__class__': private and dunder attributes are not allowed")],
                 id="dunder-attribute-through-getattr"),
    pytest.param("rule r: torch.neg(x) => x where x.__class__ is None\n",
                 [(1, 33, "'.__class__': guards may not read private or dunder attributes")],
                 id="dunder-attribute-in-guard"),
]


@pytest.mark.parametrize(("text", "expected"), SAFETY_CASES)
def test_unsafe_names_are_load_errors(text: str, expected: list[Expected]) -> None:
    assert_diagnostics(load_error(text), expected)


def test_use_of_an_allowed_module_loads() -> None:
    """The caller, not the rule file, decides which extra modules are reachable."""
    assert len(fxrules.parse("use operator as op\nrule r: op.neg(x) => x\n").rules) == 1


# ---------------------------------------------------------------- every error of a file at once

def test_several_syntax_errors_are_reported_together() -> None:
    text = (
        "rule ok: torch.neg(torch.neg(x)) => x\n"   # 1
        "rule missing_colon torch.neg(x) => x\n"    # 2
        "rule missing_replacement: torch.neg(x) =>\n"  # 3
        "use\n"                                      # 4
        "rule unclosed: torch.neg(x => x\n"         # 5
        "rule ok2: x + 0 => x\n"                     # 6
    )
    with pytest.raises(FxrSyntaxError) as info:
        fxrules.parse(text, filename="bad.fxr")
    assert_diagnostics(info.value, [
        (2, 20, "expected ':' after the rule name"),
        (3, 42, "expected an expression after '=>'"),
        (4, 4, "expected a module name after 'use'"),
        (5, 28, "expected a closing ')'"),
    ])


def test_several_semantic_errors_are_reported_together() -> None:
    text = (
        "use os\n"                                          # 1
        "rule a: torch.neg(x) => y\n"                       # 2
        "rule b: x => x\n"                                  # 3
        "rule c:\n"                                         # 4
        "    given:\n"                                      # 5
        "        w: Tensr\n"                                # 6
        "    pattern:\n"                                    # 7
        "        return torch.neg(x)\n"                     # 8
        "    where:\n"                                      # 9
        "        q > 1\n"                                   # 10
        "    replace:\n"                                    # 11
        "        return x, x\n"                             # 12
        "rule a: torch.relu(x) => x\n"                      # 13
    )
    assert_diagnostics(load_error(text), [
        (1, 5, "unknown name 'os'"),
        (2, 25, "'y' is not bound by the pattern"),
        (3, 9, NO_OPERATION),
        (6, 12, "unknown type 'Tensr'", "did you mean 'Tensor'?"),
        (10, 9, "the guard reads 'q', which the pattern does not bind"),
        (12, 9, "the pattern returns 1 value(s) but the replacement returns 2"),
        (13, 6, "duplicate rule name 'a' (first defined at bad.fxr:2:6)"),
    ])


def test_syntax_and_semantic_errors_of_one_file_are_reported_together() -> None:
    """Card §8: errors in one file are all reported at once, not only the first kind found."""
    text = "rule a: torch.reluu(x) => x\nrule b: torch.neg(x) =>\n"
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse(text, filename="bad.fxr")
    assert_diagnostics(info.value, [
        (1, 15, "unknown target 'torch.reluu'", "did you mean 'torch.relu'?"),
        (2, 24, "expected an expression after '=>'"),
    ])


# ---------------------------------------------------------------- includes, with real files

def test_include_cycle_names_the_cycle(tmp_path: Path) -> None:
    (tmp_path / "a.fxr").write_text('include "b.fxr"\nrule ra: torch.neg(x) => x\n')
    (tmp_path / "b.fxr").write_text('rule rb: torch.relu(x) => x\ninclude "c.fxr"\n')
    (tmp_path / "c.fxr").write_text('include "a.fxr"\n')
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "a.fxr")
    [diagnostic] = info.value.diagnostics
    assert (diagnostic.span.file, diagnostic.span.line, diagnostic.span.column, diagnostic.message) == (
        str(tmp_path / "c.fxr"), 1, 1, "include cycle: a.fxr -> b.fxr -> c.fxr -> a.fxr")
    assert diagnostic.source_line == 'include "a.fxr"'


def test_a_file_including_itself_is_a_cycle(tmp_path: Path) -> None:
    (tmp_path / "self.fxr").write_text('rule r: torch.neg(x) => x\ninclude "self.fxr"\n')
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "self.fxr")
    assert diagnostics(info.value) == [(2, 1, "include cycle: self.fxr -> self.fxr", None)]


def test_include_not_found_next_to_the_file(tmp_path: Path) -> None:
    main = tmp_path / "main.fxr"
    main.write_text('rule r: torch.neg(x) => x\ninclude "missing.fxr"\n')
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(main)
    assert diagnostics(info.value) == [
        (2, 1, "included file 'missing.fxr' not found",
         f"looked next to {main} and among the bundled rulesets: {BUNDLED}"),
    ]


def test_errors_in_an_included_file_point_into_that_file(tmp_path: Path) -> None:
    (tmp_path / "main.fxr").write_text('include "lib.fxr"\nrule ok: torch.neg(x) => x\n')
    (tmp_path / "lib.fxr").write_text("rule bad: torch.neg(x) => y\nrule worse: torch.neg(x) =>\n")
    with pytest.raises(FxrLoadError) as info:
        fxrules.load(tmp_path / "main.fxr")
    unbound, diagnostic = info.value.diagnostics  # the semantic error too: all of a file's errors at once
    assert (unbound.span.file, unbound.span.line, unbound.span.column, unbound.message) == (
        str(tmp_path / "lib.fxr"), 1, 27, "'y' is not bound by the pattern")
    assert (diagnostic.span.file, diagnostic.span.line, diagnostic.span.column, diagnostic.message) == (
        str(tmp_path / "lib.fxr"), 2, 28, "expected an expression after '=>'")
    assert diagnostic.source_line == "rule worse: torch.neg(x) =>"


# ---------------------------------------------------------------- how an error prints

def test_error_prints_like_a_compiler_diagnostic() -> None:
    error = load_error("rule ok: torch.neg(x) => x\nrule r: torch.neg(x) =>\n")
    assert isinstance(error, FxrError)
    assert str(error) == (
        "bad.fxr:2:24: error: expected an expression after '=>'\n"
        "    rule r: torch.neg(x) =>\n"
        "                           ^"
    )


def test_error_prints_its_hint() -> None:
    text = ("rule r:\n    given:\n        x: Tensr\n    pattern:\n        return torch.neg(x)\n"
            "    replace:\n        return x\n")
    assert str(load_error(text)) == (
        "bad.fxr:3:12: error: unknown type 'Tensr'\n"
        "            x: Tensr\n"
        "               ^\n"
        "  hint: did you mean 'Tensor'?"
    )


def test_every_diagnostic_of_a_file_prints_with_its_own_line() -> None:
    error = load_error("rule a: torch.neg(x) => y\nrule b: x => x\n")
    blocks = str(error).split("\n")
    assert blocks[0] == "bad.fxr:1:25: error: 'y' is not bound by the pattern"
    assert blocks[1:3] == ["    rule a: torch.neg(x) => y", "                            ^"]
    assert blocks[3] == f"bad.fxr:2:9: error: {NO_OPERATION}"
    assert blocks[4:6] == ["    rule b: x => x", "            ^"]
    assert blocks[6] == f"  hint: {NO_OPERATION_HINT}"


@pytest.mark.parametrize("text", [case.values[0] for case in SYNTAX_CASES + SEMANTIC_CASES + SAFETY_CASES])
def test_caret_stands_under_the_reported_column(text: str) -> None:
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse(text, filename="bad.fxr")
    lines = text.split("\n")
    for diagnostic in info.value.diagnostics:
        assert 1 <= diagnostic.span.line <= len(lines)
        assert diagnostic.source_line == lines[diagnostic.span.line - 1]
        assert 1 <= diagnostic.span.column <= len(diagnostic.source_line) + 1
        rendered = diagnostic.render().split("\n")
        assert rendered[0] == f"bad.fxr:{diagnostic.span.line}:{diagnostic.span.column}: error: {diagnostic.message}"
        assert rendered[2].index("^") - 4 == diagnostic.span.column - 1


def test_source_line_is_the_line_the_column_counts_in() -> None:
    """A form feed is whitespace inside a line, not a line break: the diagnostic shows line 2 as written."""
    error = load_error("rule r: torch.neg(x\f) => x\nrule s: torch.neg(x) => y\n")
    [diagnostic] = error.diagnostics
    assert (diagnostic.span.line, diagnostic.span.column) == (2, 25)
    assert diagnostic.source_line == "rule s: torch.neg(x) => y"


def test_huge_integer_literal_is_a_load_error_not_a_crash() -> None:
    digits = "1" * 5000
    with pytest.raises(FxrError) as info:
        fxrules.parse(f"rule r: x * {digits} => x\n", filename="bad.fxr")
    [diagnostic] = info.value.diagnostics  # type: ignore[attr-defined]
    assert (diagnostic.span.line, diagnostic.span.column) == (1, 13)


def test_the_caret_stands_under_the_column_in_a_tab_indented_line() -> None:
    """The source line is printed with its tab, and the caret line keeps that tab, so a terminal shows the
    caret under the spot."""
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse("rule r:\n\ttorch.reluu(x) => x\n")
    source, caret = str(info.value).splitlines()[1:3]
    assert source.expandtabs(8).index("reluu") == caret.expandtabs(8).index("^")
