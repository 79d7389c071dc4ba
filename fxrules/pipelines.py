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
not wrapped in Dynamo's ``BackendCompilerFailed``; ``apply`` has left the
graph as it was and the model itself is untouched, so it still runs eagerly.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch._dynamo.exc import ShortenTraceback
from torch._inductor.custom_graph_pass import CustomGraphPass

from fxrules import bundled
from fxrules.diagnostics import FxrError, FxrUsageError
from fxrules.engine import RulesArgument, apply, load_rules
from fxrules.report import Report

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
        self.ruleset = load_rules(rules, apply_kwargs.get("allow", ()))
        self.then = _next_backend(then)
        self.apply_kwargs = apply_kwargs
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


def backend(rules: RulesArgument, *, then: str | CompilerFn = "inductor", **apply_kwargs: Any) -> Backend:
    """A backend for ``torch.compile(model, backend=...)`` that rewrites each graph with ``rules`` first.

    ``then`` is the backend that compiles the rewritten graph: a name Dynamo
    knows (``"inductor"``, ``"eager"``, ``"aot_eager"``...) or a callable
    ``(gm, example_inputs) -> callable``.  ``apply_kwargs`` go to
    :func:`fxrules.apply` for every graph (``helpers=``, ``allow=``, ...).
    """
    if "example_inputs" in apply_kwargs:
        raise FxrUsageError("backend() takes no example_inputs: Dynamo graphs carry their own metadata")
    return Backend(rules, then, apply_kwargs)


def _next_backend(then: str | CompilerFn) -> CompilerFn:
    if callable(then):
        return then
    if isinstance(then, str):
        from torch._dynamo import list_backends, lookup_backend

        try:
            return lookup_backend(then)
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
        self.ruleset = load_rules(rules, apply_kwargs.get("allow", ()))
        self.apply_kwargs = apply_kwargs
        self.reports: list[Report] = []
        self._uuid = _content_uuid(self.ruleset.digest, apply_kwargs.get("helpers") or {})

    def __call__(self, graph: torch.fx.Graph) -> None:
        gm = graph.owning_module
        if not isinstance(gm, torch.fx.GraphModule):
            raise FxrUsageError("the Inductor pass got a graph without an owning GraphModule")
        try:
            self.reports.append(apply(gm, self.ruleset, **self.apply_kwargs))
        except FxrError as error:
            raise FxrCompileError(error, inspect.currentframe()) from error

    def uuid(self) -> str:
        """Changes when the rules' text, the helpers' code, or fxrules itself changes."""
        return self._uuid


def inductor_pass(rules: RulesArgument, **apply_kwargs: Any) -> InductorPass:
    """A ``CustomGraphPass`` for ``torch._inductor.config.post_grad_custom_post_pass`` (or ``pre_grad_custom_pass``)."""
    if "example_inputs" in apply_kwargs:
        raise FxrUsageError("inductor_pass() takes no example_inputs: Inductor graphs carry their own metadata")
    return InductorPass(rules, apply_kwargs)


def _content_uuid(rules_digest: str, helpers: dict[str, Callable[..., Any]]) -> str:
    if not rules_digest:
        raise FxrUsageError("the rules have no content digest (a RuleSet built in Python): load them from "
                            "text with fxrules.load or fxrules.parse so the pass can be cached")
    parts = [rules_digest, _package_digest()]
    for name in sorted(helpers):
        code = getattr(helpers[name], "__code__", None)
        parts.append(f"{name}={hashlib.sha256(code.co_code).hexdigest() if code else repr(helpers[name])}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _package_digest() -> str:
    """fxrules' own source, grammar and prelude: a new engine may rewrite the same rules differently."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    digest.update(bundled.grammar_text().encode())
    prelude = bundled.ruleset(bundled.PRELUDE)
    digest.update(prelude.read_bytes() if prelude is not None else b"")
    return digest.hexdigest()
