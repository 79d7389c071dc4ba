"""Public spellings in generated code: ``torch.nn.functional.gelu(x)``, not ``torch._C._nn.gelu(x)``.

FX writes a torch function into a graph's code under the module the function says it comes from
(``__module__``), which for many public functions is private: ``F.gelu`` *is* ``torch._C._nn.gelu``, and
``torch.special.erfcx`` is ``torch._C._special.special_erfcx``.  The node's target stays that object; only
the text changes.  :func:`public_names` maps each such private name to the public one, from the public
namespaces in :data:`PUBLIC_NAMESPACES`, and only where both names lead to the very same object, so
respelled code calls exactly what it called before.  :func:`spell_publicly` installs the respelling on a
graph as a code transformer (``Graph.on_generate_code``), which every later ``recompile``, ``print_readable``,
``to_folder`` and ``deepcopy`` of the module uses, whatever the graph's code generator (Dynamo's and
export's pytree code generators included: the generator itself is not replaced).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from typing import Any

import torch.fx
from torch.fx.node import _get_qualified_name  # the name FX's code generation writes

#: The namespaces public names come from, best first: an object public under several names is spelled
#: with the first namespace's (``torch.nn.functional.has_torch_function``, not ``torch.autograd``'s).
PUBLIC_NAMESPACES = ("torch.nn.functional", "torch", "torch.special", "torch.linalg", "torch.fft")

# A dotted name from ``torch`` with a private segment: the only names looked up (a public one is never respelled)
_PRIVATE_NAME = re.compile(r"torch(?:\.[a-zA-Z]\w*)*\._\w*(?:\.\w+)*")
# The start of a line up to a point that is code: not inside a string literal (FX writes strings with repr,
# on one line) nor a comment
_CODE = re.compile(r"""(?:[^'"#\n]|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")*""")
_Transformer = Callable[[list[str]], list[str]]


@functools.cache
def public_names() -> dict[str, str]:
    """Private qualified name (as FX writes it) -> public dotted name of the same object."""
    found: dict[str, tuple[tuple[int, bool, str], str]] = {}
    for rank, namespace_name in enumerate(PUBLIC_NAMESPACES):
        namespace = importlib.import_module(namespace_name)
        for name, value in vars(namespace).items():
            if name.startswith("_") or not callable(value) or isinstance(value, type):
                continue
            private = _qualified_name(value)
            if private is None or "._" not in private or _resolve(private) is not value:
                continue
            # the namespace's rank, then the name FX would have used, then alphabetical: the same every run
            key = (rank, name != private.rsplit(".", 1)[-1], name)
            if private not in found or key < found[private][0]:
                found[private] = (key, f"{namespace_name}.{name}")
    return {private: public for private, (_, public) in found.items()}


def _qualified_name(value: Any) -> str | None:
    try:
        return _get_qualified_name(value)
    except Exception:  # an object FX could not name has no name to replace
        return None


def _resolve(dotted: str) -> Any:
    """The object ``dotted`` names from ``torch``, as the generated code would look it up (None if none)."""
    found: Any = torch
    for part in dotted.split(".")[1:]:
        found = getattr(found, part, None)
    return found


def respell(source: str) -> str:
    """``source`` with every private name of :func:`public_names` spelled publicly, in code only (not in
    strings or comments), whole names only (``torch._C._nn.gelu_foo`` and ``x.torch._C._nn.gelu`` stay)."""
    if "torch._" not in source:  # the common case: nothing to look up
        return source
    names = public_names()

    def replace(found: re.Match[str]) -> str:
        name, start = found[0], found.start()
        public = names.get(name)
        if public is None or (start and (source[start - 1].isalnum() or source[start - 1] in "._")):
            return name
        line = source.rfind("\n", 0, start) + 1
        return public if _CODE.fullmatch(source, line, start) else name

    return _PRIVATE_NAME.sub(replace, source)


class PublicSpellings:
    """A code transformer for ``Graph.on_generate_code``: the previous transformer's body, respelled."""

    def __init__(self, previous: _Transformer | None) -> None:
        self.previous = previous

    def __call__(self, body: list[str]) -> list[str]:
        if self.previous is not None:
            body = self.previous(body)
        return [respell("".join(body))]


def spell_publicly(graph: torch.fx.Graph) -> None:
    """Make the code generated for ``graph`` from now on use public names (a graph spelled publicly already
    is left as it is)."""
    # on_generate_code also returns a context manager that would restore the previous transformer: it is
    # never entered, so it never runs
    graph.on_generate_code(lambda previous: previous if isinstance(previous, PublicSpellings)
                           else PublicSpellings(previous))
