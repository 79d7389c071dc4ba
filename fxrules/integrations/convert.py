"""From ``torch.fx.subgraph_rewriter.replace_pattern`` to rules: the same pair of functions as a ``.fxr`` rule.

:func:`rule_text` traces the pattern and the replacement (Python callables,
``nn.Module`` objects, ``GraphModule`` objects or ``Graph`` objects, as
``replace_pattern`` takes them) and writes the rule they make: the pattern's
parameters are its captures, and the replacement's parameters stand for the
pattern's in order, as ``replace_pattern`` maps them.  A node used once is
written inside its user, one used more is named by a statement of its own.
:func:`rule_from_functions` resolves that text into a :class:`~fxrules.Rule`;
``fxrules convert module:pattern module:replacement`` prints it.

:func:`replace_pattern` is a drop-in for torch's: the same arguments, the
same list of ``Match(anchor, nodes_map)``, running on fxrules' engine (one
pass, linear in the graph, all or nothing).  It matches as torch does, as
written: the rule is used with the operands of ``+`` and ``*`` in their
written order only and arguments compared as written (a ``.fxr`` rule would
match ``b + a`` and ``dim=1`` for a positional ``1`` too).
"""

from __future__ import annotations

import importlib
import keyword
import math
import operator
import re
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import torch
import torch.fx
from torch.fx.subgraph_rewriter import Match

from fxrules.diagnostics import FxrLoopWarning, FxrUsageError
from fxrules.engine.driver import one_pass
from fxrules.lang import bundled
from fxrules.lang.formatting import format_text
from fxrules.lang.ir import AltTemplate, OpTemplate, Rule, RuleSet, SeqTemplate, SliceTemplate, Template
from fxrules.lang.loader import parse
from fxrules.lang.parser import grammar_keywords
from fxrules.match.matcher import Match as RuleMatch

Traceable = Callable[..., Any] | torch.nn.Module | torch.fx.Graph

#: Modules a rule file names without ``use``, and the short names it knows them by.
_NAMESPACES: tuple[tuple[str, Any], ...] = (
    ("torch", torch), ("F", torch.nn.functional), ("operator", operator), ("math", math),
    ("torch.linalg", torch.linalg), ("torch.special", torch.special), ("torch.fft", torch.fft),
)
_BINARY = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
           operator.mod: "%", operator.pow: "**", operator.matmul: "@"}
_UNARY = {operator.neg: "-", operator.pos: "+"}
#: Names a rule file already gives a meaning: an interior node must not be named so.
_TAKEN = frozenset({"torch", "F", "nn", "operator", "math", "aten", "Tensor", "_"})


def graph_of(function: Traceable) -> torch.fx.Graph:
    """The graph ``replace_pattern`` would trace ``function`` into."""
    if isinstance(function, torch.fx.GraphModule):
        return function.graph
    if isinstance(function, torch.fx.Graph):
        return function
    return torch.fx.symbolic_trace(function).graph


def _traced(function: Traceable, what: str) -> torch.fx.Graph:
    """:func:`graph_of`, with a usage error for what does not trace (the drop-in keeps torch's exceptions)."""
    if not callable(function) and not isinstance(function, torch.fx.Graph):
        raise FxrUsageError(f"{what} ({type(function).__name__}) is not a function, nn.Module or Graph")
    try:
        return graph_of(function)
    except Exception as error:  # the user's code runs while traced: any exception is theirs
        raise FxrUsageError(f"cannot trace {what}: {type(error).__name__}: {error}") from None


def rule_text(pattern: Traceable, replacement: Traceable, name: str = "converted") -> str:
    """The ``.fxr`` text of the rule ``replace_pattern(gm, pattern, replacement)`` applies, formatted."""
    return _Converter(_traced(pattern, "the pattern"), _traced(replacement, "the replacement"), name).text()[0]


def rule_from_functions(pattern: Traceable, replacement: Traceable, name: str = "converted") -> Rule:
    """The rule ``replace_pattern(gm, pattern, replacement)`` applies, resolved as its ``.fxr`` text is."""
    converter = _Converter(_traced(pattern, "the pattern"), _traced(replacement, "the replacement"), name)
    return _resolved(converter)[name]


def _resolved(converter: _Converter, *, looping: bool = True) -> RuleSet:
    """The rule's one-rule set; ``looping=False``: without the warning that the rule matches its own
    replacement, which one pass never meets."""
    text, allow = converter.text()
    with warnings.catch_warnings():
        if not looping:
            warnings.simplefilter("ignore", FxrLoopWarning)
        return parse(text, f"<{converter.name}>", allow=allow)


def replace_pattern(gm: torch.fx.GraphModule, pattern: Traceable, replacement: Traceable) -> list[Match]:
    """``torch.fx.subgraph_rewriter.replace_pattern`` on fxrules' engine: the same arguments, the same matches.

    Each ``Match`` maps the pattern graph's nodes (its placeholders too, to what they matched: a node or a
    literal) to the graph's; its anchor is, as in torch's, the pattern's node the match was found from (its
    first output that nothing else in the pattern uses), not the graph's.  The matched nodes
    are erased, as torch erases them; so is any other node without side effects left unused.
    """
    pattern_graph = graph_of(pattern)
    # every pattern node named, so that a match's bindings say what each matched
    converter = _Converter(pattern_graph, graph_of(replacement), "replace_pattern", name_all=True)
    rule = _as_written(_resolved(converter, looping=False)["replace_pattern"])
    # a pattern input the pattern does not use matches nothing (torch's matcher raises KeyError on one)
    names = {node: name for node, name in converter.pattern_names.items() if node.users and node.op != "output"}
    anchor = _anchor(pattern_graph)
    matches: list[Match] = []

    def distinct(match: RuleMatch) -> bool:  # torch's matcher maps no two pattern nodes to one graph node
        found = [match.bindings[name] for name in names.values()]
        nodes = [value for value in found if isinstance(value, torch.fx.Node)]
        return len(set(nodes)) == len(nodes)

    def record(match: RuleMatch) -> None:
        matches.append(Match(anchor=anchor, nodes_map={node: match.bindings[name] for node, name in names.items()}))

    one_pass(gm, RuleSet((rule,), "<replace_pattern>"), record, distinct)
    return matches


def _anchor(graph: torch.fx.Graph) -> torch.fx.Node:
    """The pattern's node torch reports as a match's anchor: its first output used by nothing else."""
    returned = graph.output_node().all_input_nodes
    return next((node for node in returned if len(node.users) == 1), returned[0])


def _returned(graph: torch.fx.Graph) -> list[Any]:
    """What the graph returns, one value per output (a node, or a constant)."""
    output: Any = graph.output_node().args[0]
    return list(output) if isinstance(output, tuple | list) else [output]


def _as_written(rule: Rule) -> Rule:
    """``rule`` matching as torch's matcher does: operands in their written order, arguments as written."""
    copies: dict[int, Template] = {}

    def copy(template: Template) -> Template:
        if id(template) in copies:
            return copies[id(template)]
        result: Template = template
        if isinstance(template, OpTemplate):
            result = attrs.evolve(template, args=tuple(copy(a) for a in template.args),
                                  kwargs=tuple((k, copy(v)) for k, v in template.kwargs),
                                  commutative=False, signature=None, bound=None)
        elif isinstance(template, SeqTemplate):
            result = attrs.evolve(template, items=tuple(copy(item) for item in template.items))
        elif isinstance(template, AltTemplate | SliceTemplate):  # not written by the converter
            raise AssertionError(f"unexpected {type(template).__name__} in a converted pattern")
        copies[id(template)] = result
        return result

    return attrs.evolve(rule, pattern=tuple(copy(output) for output in rule.pattern))


# ---------------------------------------------------------------- writing the rule


@attrs.define
class _Side:
    """One graph written as statements and returned expressions."""

    names: dict[torch.fx.Node, str]
    statements: list[str] = attrs.Factory(list)
    returned: list[str] = attrs.Factory(list)


class _Converter:
    """Writes the rule of a pattern graph and a replacement graph.

    ``name_all``: every node named by a statement (a match's bindings then say what each matched), and the
    text left unformatted (only the parser reads it).  ``text()`` is called once: it chooses the names.
    """

    def __init__(self, pattern: torch.fx.Graph, replacement: torch.fx.Graph, name: str, *,
                 name_all: bool = False) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in grammar_keywords():
            raise FxrUsageError(f"a rule name must be a name, not {name!r}")
        self.name = name
        self.pattern, self.replacement = pattern, replacement
        self.name_all = name_all  # name every node by a statement, not only those used twice
        self.formatted = not name_all  # text for people, laid out by fxrules fmt; else only for the parser
        self.pattern_names: dict[torch.fx.Node, str] = {}
        self.uses: dict[str, str] = {}  # module -> the alias the rule file uses it by
        self.taken = set(_TAKEN) | _family_names()

    def text(self) -> tuple[str, tuple[str, ...]]:
        """The formatted rule text and the modules it needs allowed."""
        inputs = _placeholders(self.pattern)
        given = _placeholders(self.replacement)
        if len(inputs) != len(given):
            raise FxrUsageError(f"the pattern takes {len(inputs)} inputs and the replacement {len(given)}: "
                                "replace_pattern passes the pattern's inputs to the replacement in order")
        captures = {node: self._fresh(str(node.target)) for node in inputs}
        pattern = self._side(self.pattern, captures)
        self.pattern_names = pattern.names
        replacement = self._side(self.replacement, dict(zip(given, captures.values(), strict=True)))
        uses = "".join(f"use {module} as {alias}\n" for module, alias in self.uses.items())
        if not pattern.statements and not replacement.statements and len(pattern.returned) == len(
                replacement.returned) == 1:
            body = f"rule {self.name}: {pattern.returned[0]} => {replacement.returned[0]}\n"
        else:
            body = f"rule {self.name}:\n    pattern:\n{_block(pattern)}    replace:\n{_block(replacement)}"
        text = uses + body
        return (format_text(text, f"<{self.name}>") if self.formatted else text), tuple(self.uses)

    def _fresh(self, wanted: str, local: set[str] | None = None) -> str:
        """A name like ``wanted`` that means nothing yet: in the whole rule, or in one section (``local``)."""
        name = re.sub(r"\W", "_", wanted)
        name = name if re.match(r"[A-Za-z_]", name) else f"_{name}"
        reserved = self.taken | (local or set()) | grammar_keywords()
        while name in reserved or keyword.iskeyword(name):
            name += "_"
        (self.taken if local is None else local).add(name)
        return name

    def _side(self, graph: torch.fx.Graph, inputs: dict[torch.fx.Node, str]) -> _Side:
        side = _Side(dict(inputs))
        uses = _uses(graph)
        local: set[str] = set()  # a pattern and its replacement may both name a node 'a'
        for node in graph.nodes:
            if node.op in {"placeholder", "output"}:
                continue
            if node.op not in {"call_function", "call_method"}:
                raise FxrUsageError(
                    f"node '{node.name}' is a {node.op}: only function and method calls convert; write a rule "
                    "with an Attr or nn.Module capture for it by hand (see docs/authoring.md)")
            expression = self._call(node, side.names)
            if uses[node] == 1 and not self.name_all:  # written where it is used: a second use, a second node
                side.names[node] = f"({expression})"
            else:
                side.names[node] = self._fresh(node.name, local)
                side.statements.append(f"{side.names[node]} = {expression}")
        side.returned = [self._value(value, side.names) for value in _returned(graph)]
        return side

    def _call(self, node: torch.fx.Node, names: Mapping[torch.fx.Node, str]) -> str:
        target = node.target
        if node.op == "call_function" and target is operator.getitem and len(node.args) == 2 and not node.kwargs:
            return f"{self._value(node.args[0], names)}[{self._index(node.args[1], names)}]"
        args = [self._value(arg, names) for arg in node.args]
        keywords = [f"{key}={self._value(value, names)}" for key, value in node.kwargs.items()]
        if node.op == "call_method":
            receiver, *rest = args
            return f"{receiver}.{node.target}({', '.join([*rest, *keywords])})"
        if not keywords and target in _BINARY and len(args) == 2:
            return f"{args[0]} {_BINARY[target]} {args[1]}"
        if not keywords and target in _UNARY and len(args) == 1:
            return f"{_UNARY[target]}{args[0]}"
        return f"{self._spelling(target)}({', '.join([*args, *keywords])})"

    def _index(self, index: Any, names: Mapping[torch.fx.Node, str]) -> str:
        items = index if isinstance(index, tuple) and index else (index,)
        written = [self._slice(item, names) if isinstance(item, slice) else self._value(item, names) for item in items]
        return ", ".join(written) + ("," if isinstance(index, tuple) and len(index) == 1 else "")

    def _slice(self, item: slice, names: Mapping[torch.fx.Node, str]) -> str:
        start, stop, step = (self._value(part, names) if part is not None else "" for part in
                             (item.start, item.stop, item.step))
        return f"{start}:{stop}:{step}" if step else f"{start}:{stop}"

    def _value(self, value: Any, names: Mapping[torch.fx.Node, str]) -> str:
        """An argument as the rule file writes it."""
        if isinstance(value, torch.fx.Node):
            return names[value]
        if value is None or isinstance(value, bool):
            return str(value)
        if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
            return repr(value)
        if isinstance(value, float):  # the language predefines `nan` and `inf`
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        if isinstance(value, str) and value.isprintable() and "\\" not in value:
            return repr(value)
        if isinstance(value, torch.dtype):
            return str(value)
        if value is Ellipsis:
            return "..."
        if isinstance(value, list):
            return f"[{', '.join(self._value(item, names) for item in value)}]"
        if isinstance(value, tuple):
            items = [self._value(item, names) for item in value]
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        raise FxrUsageError(f"the argument {value!r} ({type(value).__name__}) cannot be written in a rule file")

    def _spelling(self, target: Any) -> str:
        """How a rule file names ``target``: through a known namespace, else through ``use`` of its module."""
        if isinstance(target, torch._ops.OpOverload) and target.namespace == "aten":
            return f"aten.{target._opname}.{target._overloadname}"
        name = getattr(target, "__name__", None)
        for prefix, module in _NAMESPACES:
            if name and getattr(module, name, None) is target:
                return f"{prefix}.{name}"
        module_name, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
        if module_name and qualname and "<" not in qualname and _lookup(module_name, qualname) is target:
            if module_name not in self.uses:
                self.uses[module_name] = self._fresh(module_name.rsplit(".", 1)[-1])
            return f"{self.uses[module_name]}.{qualname}"
        raise FxrUsageError(f"{target!r} cannot be named in a rule file: define it at the top level of a module")


def _uses(graph: torch.fx.Graph) -> Counter[torch.fx.Node]:
    """How many times each node is an argument (the output's included)."""
    counted: Counter[torch.fx.Node] = Counter()
    for node in graph.nodes:
        torch.fx.node.map_arg((node.args, node.kwargs), lambda used: counted.update([used]))
    return counted


def _block(side: _Side) -> str:
    lines = [*side.statements, f"return {', '.join(side.returned)}"]
    return "".join(f"        {line}\n" for line in lines)


def _placeholders(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [node for node in graph.nodes if node.op == "placeholder"]


def _lookup(module_name: str, qualname: str) -> Any:
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def _family_names() -> set[str]:
    prelude = bundled.ruleset(bundled.PRELUDE)
    assert prelude is not None
    return set(re.findall(r"^family\s+(\w+)", prelude.read_text(encoding="utf-8"), re.MULTILINE))
