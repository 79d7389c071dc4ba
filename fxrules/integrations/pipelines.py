"""fxrules as a stage of ``torch.compile``: a Dynamo backend and an Inductor custom graph pass.

:func:`backend` rewrites each graph Dynamo captures (metadata from the
FakeTensors Dynamo records) and hands it on to Inductor, ``"eager"`` or
another backend; :func:`inductor_pass` rewrites Inductor's own graphs from
inside Inductor (``post_grad_custom_post_pass`` for aten-level rules, or
``pre_grad_custom_pass``), with a ``uuid()`` derived from the rules' text so
Inductor's cache is invalidated when the rules change.

Rules are loaded when the stage is built, so a bad rule file fails there, not
in the middle of a compilation.  An ``FxrError`` raised while compiling comes
out of ``torch.compile`` as an ``FxrError`` (see :class:`FxrCompileError`),
not wrapped in Dynamo's ``BackendCompilerFailed`` (only Inductor's code path
without its FX graph cache wraps it, in an ``InductorError``); ``apply`` has
left the graph as it was and the model is untouched, so it still runs eagerly.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import marshal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch._dynamo.exc import ShortenTraceback
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.decomposition import select_decomp_table

from fxrules.diagnostics import FxrError, FxrUsageError
from fxrules.engine.driver import RulesArgument, apply, checked_options, load_rules
from fxrules.engine.report import Report
from fxrules.graph.subgraphs import higher_order_subgraphs
from fxrules.lang import bundled
from fxrules.lang.ir import RuleSet
from fxrules.rewrite.aten import ATEN_GRAPH

CompilerFn = Callable[[torch.fx.GraphModule, Sequence[Any]], Callable[..., Any]]


class FxrCompileError(FxrError, ShortenTraceback):
    """An ``FxrError`` raised inside a compile pipeline, as the user sees it.

    Dynamo wraps what a backend raises in ``BackendCompilerFailed`` unless it
    is a ``ShortenTraceback``; this one passes through with its traceback cut
    to start at the fxrules stage.  The original error is its ``error``
    (Dynamo re-raises it ``from None``, which drops ``__cause__``).
    """

    def __init__(self, error: FxrError, stage: Any) -> None:
        super().__init__(str(error), first_useful_frame=stage)
        self.error = error


class Backend:
    """A ``torch.compile`` backend: ``apply`` the rules to each Dynamo graph, then compile it with ``then``.

    ``reports`` holds one :class:`Report` per compiled graph, in compilation
    order (a graph break gives several graphs; a recompilation, another).
    """

    __name__ = "fxrules"  # Dynamo names the backend in its messages by this

    def __init__(self, rules: RulesArgument, then: str | CompilerFn, apply_kwargs: dict[str, Any]) -> None:
        self.ruleset, self.apply_kwargs = _checked_rules("backend", rules, apply_kwargs)
        self.then = _next_backend(then)
        self.reports: list[Report] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        try:
            report = apply(gm, self.ruleset, **self.apply_kwargs)
        except FxrError as error:
            raise FxrCompileError(error, inspect.currentframe()) from error
        self.reports.append(report)
        return self.then(gm, example_inputs)

    def __repr__(self) -> str:
        return f"fxrules.backend({self.ruleset.source}, {len(self.reports)} graphs compiled)"


def _checked_rules(stage: str, rules: RulesArgument, apply_kwargs: dict[str, Any]) -> tuple[RuleSet, dict[str, Any]]:
    """Load and select the rules and check ``apply``'s options now, so a mistake fails here, not mid-compilation;
    the rules selected, and the options to apply them with (the selection made)."""
    if "example_inputs" in apply_kwargs:
        raise FxrUsageError(f"{stage}() takes no example_inputs: compiled graphs carry their own metadata")
    try:
        bound = inspect.signature(apply).bind(None, None, **apply_kwargs)
    except TypeError as error:
        raise FxrUsageError(f"{stage}(): {error} (the options are those of fxrules.apply)") from error
    bound.apply_defaults()
    options = bound.arguments
    ruleset = load_rules(rules, options["allow"]).select(options["only"], options["exclude"])
    checked_options(ruleset, options["helpers"], options["max_passes"], options["predicates"])
    return ruleset, {key: value for key, value in apply_kwargs.items() if key not in {"only", "exclude"}}


def backend(rules: RulesArgument, *, then: str | CompilerFn = "inductor", **apply_kwargs: Any) -> Backend:
    """A backend for ``torch.compile(model, backend=...)`` that rewrites each graph with ``rules`` first.

    ``then`` is the backend that compiles the rewritten graph: a name Dynamo
    knows (``"inductor"``, ``"eager"``, ``"aot_eager"``...) or a callable
    ``(gm, example_inputs) -> callable``.  ``apply_kwargs`` go to
    :func:`fxrules.apply` for every graph (``helpers=``, ``allow=``, ...).
    """
    return Backend(rules, then, apply_kwargs)


def _next_backend(then: str | CompilerFn) -> CompilerFn:
    if callable(then):
        return then
    if isinstance(then, str):
        from torch._dynamo import list_backends, lookup_backend

        try:
            # torch types a backend's inputs as list[Tensor]; Dynamo passes a list, as CompilerFn's callers do
            return lookup_backend(then)  # type: ignore[return-value]
        except Exception as error:  # Dynamo raises its own InvalidBackend
            known = ", ".join(sorted(list_backends(exclude_tags=())))
            raise FxrUsageError(f"then={then!r} is not a torch.compile backend; known: {known}") from error
    raise FxrUsageError(f"then must be a backend name or a callable (gm, example_inputs), got {type(then).__name__}")


class InductorPass(CustomGraphPass):
    """An Inductor custom graph pass that applies rules to the graph Inductor gives it.

    Use it as ``torch._inductor.config.post_grad_custom_post_pass`` (aten-level
    graphs; rules that name aten targets or families with aten members) or as
    ``pre_grad_custom_pass`` (Dynamo-level graphs).  ``reports`` holds one
    :class:`Report` per graph rewritten.
    """

    def __init__(self, rules: RulesArgument, apply_kwargs: dict[str, Any]) -> None:
        self.ruleset, self.apply_kwargs = _checked_rules("inductor_pass", rules, apply_kwargs)
        self.reports: list[Report] = []
        self._uuid = _content_uuid(self.ruleset.digest, apply_kwargs.get("helpers") or {},
                                   apply_kwargs.get("predicates") or {})

    def __call__(self, graph: torch.fx.Graph) -> None:
        gm = graph.owning_module
        if not isinstance(gm, torch.fx.GraphModule):
            raise FxrUsageError("the Inductor pass got a graph without an owning GraphModule")
        # apply rewrites the subgraphs of higher-order operators (torch.cond branches) too: they are as
        # decomposed as the graph itself, so they are marked alike, or a replacement there could bring
        # back an operator Inductor has no lowering for
        modules = [gm, *(subgraph for _, subgraph, _ in higher_order_subgraphs(gm))]
        aten = any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                   for module in modules for n in module.graph.nodes)
        if aten:  # post-grad (or joint): replacements in aten, and not in operators Inductor decomposed
            for module in modules:
                module.meta[ATEN_GRAPH] = _decomposed_operators()
        try:
            self.reports.append(apply(gm, self.ruleset, **self.apply_kwargs))
        except FxrError as error:
            raise FxrCompileError(error, inspect.currentframe()) from error
        finally:
            for module in modules:
                module.meta.pop(ATEN_GRAPH, None)

    def uuid(self) -> str:
        """Changes when the rules' text or selection, the helpers' or predicates' code, or fxrules itself changes."""
        return self._uuid


@functools.cache
def _decomposed_operators() -> frozenset[Any]:
    """Operators Inductor always decomposes before its post-grad passes: a decomposition and no lowering.

    (``aten.add.Tensor`` or ``aten.addmm`` have conditional decompositions, but lowerings too: they stay.)
    """
    from torch._inductor.lowering import lowerings

    return frozenset(op for op in select_decomp_table() if op not in lowerings)


def inductor_pass(rules: RulesArgument, **apply_kwargs: Any) -> InductorPass:
    """A ``CustomGraphPass`` for ``torch._inductor.config.post_grad_custom_post_pass`` (or ``pre_grad_custom_pass``)."""
    return InductorPass(rules, apply_kwargs)


def _content_uuid(rules_digest: str, helpers: dict[str, Callable[..., Any]],
                  predicates: dict[str, Callable[..., Any]]) -> str:
    if not rules_digest:
        raise FxrUsageError("the rules have no content digest (a Rule built in Python, not loaded): load them "
                            "from text with fxrules.load or fxrules.parse so the pass can be cached")
    parts = [rules_digest, _package_digest(),
             *(f"{name}={_fingerprint(helpers[name])}" for name in sorted(helpers)),
             *(f"predicate {name}={_fingerprint(predicates[name])}" for name in sorted(predicates))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


#: Values a helper may read from its globals or closure whose text says what they are.
_PLAIN = (bool, int, float, complex, str, bytes, type(None), tuple, frozenset, torch.dtype, torch.device)


def _fingerprint(helper: Any, seen: set[int] | None = None) -> str:
    """What a helper computes, as text that is the same in every process.

    A function: its code (constants and nested code included), defaults, the
    values it closes over, and what it reads from its globals (plain constants
    by value, functions by their own fingerprint); a ``functools.partial``: its
    function and arguments; a callable object: its class's ``__call__`` and its
    attributes.  ``seen`` stops recursion (a function that calls itself).
    """
    seen = set() if seen is None else seen
    if id(helper) in seen:
        return "<recursive>"
    seen.add(id(helper))
    if isinstance(helper, functools.partial):
        return f"partial({_fingerprint(helper.func, seen)}, {helper.args!r}, {sorted(helper.keywords.items())!r})"
    if inspect.isfunction(helper):
        code = helper.__code__
        closure = [_fingerprint_value(cell.cell_contents, seen) for cell in helper.__closure__ or ()]
        read = {name: helper.__globals__[name] for name in code.co_names if name in helper.__globals__}
        globals_read = sorted((name, _fingerprint_value(value, seen)) for name, value in read.items()
                              if isinstance(value, _PLAIN) or inspect.isfunction(value))
        text = (f"{marshal.dumps(code).hex()}|{helper.__defaults__!r}|{helper.__kwdefaults__!r}|{closure}|"
                f"{globals_read}")
        return hashlib.sha256(text.encode()).hexdigest()
    if inspect.isbuiltin(helper) or inspect.isclass(helper):
        return f"{helper.__module__}.{helper.__qualname__}"
    call = inspect.getattr_static(type(helper), "__call__", None)
    if inspect.isfunction(call):
        state = sorted((name, _fingerprint_value(value, seen)) for name, value in vars(helper).items())
        return f"{type(helper).__qualname__}({_fingerprint(call, seen)}, {state})"
    raise FxrUsageError(f"cannot derive a cache key from {helper!r}: give inductor_pass a function, "
                        "a functools.partial or an object with a __call__ method")


def _fingerprint_value(value: Any, seen: set[int]) -> str:
    if callable(value) and not isinstance(value, torch.Tensor):
        return _fingerprint(value, seen)
    return repr(value)


def _package_digest() -> str:
    """fxrules' own source, grammar and prelude: a new engine may rewrite the same rules differently."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parents[1].rglob("*.py")):
        digest.update(path.read_bytes())
    digest.update(bundled.grammar_text().encode())
    prelude = bundled.ruleset(bundled.PRELUDE)
    digest.update(prelude.read_bytes() if prelude is not None else b"")
    return digest.hexdigest()
