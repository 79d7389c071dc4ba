"""What a ``call_module`` node may do besides computing its result: write into its arguments, write into the
module's own parameters and buffers, run code that must not be removed, return an argument itself.

FX sees none of it (``Node.is_impure`` says a module call is pure unless the module sets ``_is_impure``), so
each module is read for what it may do (:class:`ModuleEffects`), conservatively:

* a graph module (``split_module``'s parts, a nested trace): what its graph does, down to its own submodules;
* a module of ``torch.nn``'s own classes: what its attributes say (``inplace=True``: its input; a
  normalization tracking running statistics, in training mode: those buffers; ``nn.Embedding(max_norm=...)``:
  its weight), and what its children do;
* torch.export's ``_guards_fn``: it checks its inputs, writes nothing, and stays;
* anything else, or any module with hooks (its own or global ones), a lazy module (which makes its parameters
  when first called) or a function of user code among its attributes: it may write every tensor argument and
  all of its state, return its first argument itself, and is never removed as dead code.

The state a call writes reaches the aliasing checks as the ``get_attr`` nodes of the graph that read it
(:func:`written_by`, :func:`attribute_writers`): the attribute is the module's, or one below it, or a tensor it
owns under another name (tied weights).  Nothing is kept from one ``apply`` to the next (``module.training``,
hooks and attributes may change between two); while ``apply`` rewrites one graph, :func:`attributes_fixed` keeps
what is found of its attributes and of its module calls that write state.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
from collections.abc import Iterator
from typing import Any

import attrs
import torch
import torch.fx
from torch.nn.modules import module as nn_module
from torch.nn.modules.batchnorm import _NormBase
from torch.nn.modules.lazy import LazyModuleMixin

from fxrules.graph import metadata

Node = torch.fx.Node

#: Attributes a normalization writes in place when it tracks running statistics and is training.
_RUNNING_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")

#: What ``Module.__call__`` looks up on the instance: set there, it replaces the class's code (``m.forward =
#: torch.relu_`` makes an ``nn.Identity`` write its input).
_CALLED_ON_THE_INSTANCE = ("forward", "_call_impl")

#: A module's own hooks, and every module's: each runs code of its caller's around ``forward``.
_OWN_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


@attrs.frozen
class ModuleEffects:
    """What calling one module may do besides computing its result."""

    every_argument: bool = False  # may write into each argument (opaque code, an ``inplace=True`` child)
    placeholders: tuple[tuple[int, str], ...] = ()  # a graph module: (position, name) of the inputs it writes
    state: tuple[str, ...] = ()  # paths below the module it may write ("": anything below it)
    impure: bool = False  # must run even when nothing uses its result
    returns_argument: bool = False  # its result may be its first argument or a view of it
    # runs code fxrules cannot read, which may write any tensor it reaches, not only those under its name (a
    # cache object holding the root's buffers): every attribute the graph reads
    anything: bool = False

    def writes(self) -> bool:
        return self.every_argument or bool(self.placeholders) or bool(self.state) or self.impure


#: A module whose forward fxrules cannot read.
OPAQUE = ModuleEffects(every_argument=True, state=("",), impure=True, returns_argument=True, anything=True)

#: Classes of torch outside ``torch.nn`` whose calls only check their inputs (by module and name: importing
#: ``torch.export`` would slow ``import fxrules``): what ``ExportedProgram.module()`` calls first.
_CHECKS_ONLY = frozenset({("torch.export._unlift", "GuardsFn")})


def effects_of(module: torch.nn.Module) -> ModuleEffects:
    """What a call of ``module`` may do, as the module stands now (its training flag, its hooks)."""
    if _runs_unknown_code(module):
        return OPAQUE
    if (type(module).__module__, type(module).__qualname__) in _CHECKS_ONLY:
        return ModuleEffects(impure=True)
    if isinstance(module, torch.fx.GraphModule):
        return _graph_module_effects(module)
    return _torch_module_effects(module)


def _torch_module_effects(module: torch.nn.Module) -> ModuleEffects:
    """A module of ``torch.nn``'s own classes: what it writes of its own state, and what its children do."""
    children = [(name, effects_of(child), child) for name, child in module.named_children()]
    state = [*_own_state(module), *(_below(name, path) for name, effects, _ in children for path in effects.state)]
    every_argument = any(effects.every_argument or effects.placeholders or _inplace(child)
                         for _, effects, child in children)
    if isinstance(module, torch.nn.Sequential):  # returns its input only if every step may
        returns = bool(children) and all(effects.returns_argument for _, effects, _ in children)
    else:  # torch's other modules apply their dropouts to values they compute, but a child fxrules cannot
        # read (a layer of user code in an nn.TransformerEncoder) may return what it is given: their input
        returns = isinstance(module, metadata.ALIASING_MODULES) or _inplace(module) or any(
            effects.returns_argument and not isinstance(child, metadata.ALIASING_MODULES) and not _inplace(child)
            for _, effects, child in children)
    return ModuleEffects(every_argument, (), tuple(state), any(effects.impure for _, effects, _ in children), returns,
                         any(effects.anything for _, effects, _ in children))


def _runs_unknown_code(module: torch.nn.Module) -> bool:
    """Hooks, a lazy module's first call, a class of user code (a graph module's own class is torch's), a
    ``forward`` set on the module itself (even a function of torch's), or a function of user code stored on the
    module (an activation)."""
    if isinstance(module, LazyModuleMixin) or any(getattr(module, name, None) for name in _OWN_HOOKS) \
            or any(getattr(nn_module, name) for name in _GLOBAL_HOOKS):
        return True
    cls = type(module)
    checks_only = (cls.__module__, cls.__qualname__) in _CHECKS_ONLY  # (which sets its forward itself)
    if isinstance(module, torch.fx.GraphModule):
        if cls is not torch.fx.GraphModule and cls.__bases__ != (torch.fx.GraphModule,):
            return True
    elif not _runs_torch_code_only(cls):
        return True
    attributes = vars(module)
    if not checks_only and any(name in attributes for name in _CALLED_ON_THE_INSTANCE):  # not the class's code
        return True
    return any(callable(value) and not isinstance(value, type | torch.nn.Module) and not _of_torch(value)
               for value in attributes.values())


def _runs_torch_code_only(cls: type) -> bool:
    """Whether calling an instance of ``cls`` runs torch's code only: a class of ``torch.nn`` (or one that only
    checks its inputs), or a subclass of one whose own classes add no code a call could run, only ``__init__``
    (which ran already) and plain values: ``class Act(nn.ReLU): pass`` runs ``nn.ReLU.forward``."""
    torch_classes = [klass for klass in cls.__mro__ if klass.__module__.startswith("torch.nn.modules.")
                     or (klass.__module__, klass.__qualname__) in _CHECKS_ONLY]
    return bool(torch_classes) and all(
        klass is object or klass in torch_classes
        or not any(_is_code(name, value) for name, value in vars(klass).items()) for klass in cls.__mro__)


#: Entries of every class's namespace that run nothing when an instance is called.
_INERT_CLASS_ENTRIES = frozenset({"__init__", "__dict__", "__weakref__", "__module__", "__qualname__", "__doc__",
                                  "__annotations__", "__firstlineno__", "__static_attributes__"})


def _is_code(name: str, value: Any) -> bool:
    """Whether a class entry is code a call may run: a function, a property or any other descriptor."""
    return name not in _INERT_CLASS_ENTRIES and (callable(value) or hasattr(value, "__get__"))


def _of_torch(function: Any) -> bool:
    module = getattr(function, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")


def _inplace(module: torch.nn.Module) -> bool:
    return getattr(module, "inplace", False) is True


def _own_state(module: torch.nn.Module) -> tuple[str, ...]:
    """What a module of ``torch.nn`` writes of its own: running statistics while training, an embedding's rows
    renormalized to ``max_norm``."""
    if isinstance(module, _NormBase) and module.training and module.track_running_stats:
        return tuple(name for name in _RUNNING_STATISTICS if getattr(module, name, None) is not None)
    if isinstance(module, torch.nn.Embedding | torch.nn.EmbeddingBag) and module.max_norm is not None:
        return ("weight",)
    return ()


def _below(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if path else prefix


def _graph_module_effects(module: torch.fx.GraphModule) -> ModuleEffects:
    """A graph module's effects, read from its graph: the inputs and attributes it writes (its submodules'
    among them), whether a node of it has side effects, whether its result may be its first input."""
    graph = module.graph
    placeholders = list(graph.find_nodes(op="placeholder"))
    written = tuple((position, str(placeholder.target)) for position, placeholder in enumerate(placeholders)
                    if metadata.in_place_writer(placeholder) is not None)
    state = [str(node.target) for node in graph.find_nodes(op="get_attr") if metadata.in_place_writer(node) is not None]
    calls = [(call, _effects_of_call(call)) for call in graph.find_nodes(op="call_module")]
    state += [_below(str(call.target), path) for call, effects in calls for path in effects.state]
    impure = any(node.op not in ("placeholder", "output", "get_attr") and metadata.has_side_effects(node)
                 for node in graph.nodes)
    returned = graph.output_node().all_input_nodes
    returns = bool(placeholders) and any(placeholders[0] in metadata.alias_class(node) for node in returned)
    return ModuleEffects(False, written, tuple(dict.fromkeys(state)), impure, returns,
                         any(effects.anything for _, effects in calls))


def _effects_of_call(node: Node) -> ModuleEffects:
    module = submodule(node)
    return effects_of(module) if module is not None else ModuleEffects()


def submodule(node: Node) -> torch.nn.Module | None:
    """The module a ``call_module`` node calls (None when the graph has no such module)."""
    owner = node.graph.owning_module
    try:
        return owner.get_submodule(str(node.target)) if owner is not None else None
    except AttributeError:
        return None


# ---------------------------------------------------------------- the hooks of metadata's call_module cases


def may_write(node: Node) -> bool:
    """Whether a module call may write anything, or must run even when its result is unused."""
    return _effects_of_call(node).writes()


def changes_first_argument(node: Node) -> bool:
    """Whether a module call may change its first argument in place: ``inplace=True``, or code fxrules cannot
    read."""
    module = submodule(node)
    return module is not None and (_inplace(module) or effects_of(module).every_argument)


def may_return_first(node: Node) -> bool:
    """Whether a module call's result may be its first argument or a view of it."""
    return _effects_of_call(node).returns_argument


def written_by(node: Node) -> list[Node]:
    """The nodes a module call may write into: arguments, and the ``get_attr`` nodes of the state it writes."""
    effects = _effects_of_call(node)
    if effects.every_argument:
        found = list(node.all_input_nodes)
    else:
        args, kwargs = node.args, node.kwargs
        found = [value for position, name in effects.placeholders
                 for value in metadata.nodes_of(args[position] if position < len(args) else kwargs.get(name))]
    if effects.state:
        found += [attribute for attribute in node.graph.find_nodes(op="get_attr")
                  if _writes_attribute(node, effects, attribute)]
    return found


def attribute_writers(node: Node) -> list[Node]:
    """The module calls of ``node``'s graph that may write the attribute the ``get_attr`` ``node`` reads, which
    need not be among its users."""
    return [call for call, effects in _state_writers(node.graph) if _writes_attribute(call, effects, node)]


def _state_writers(graph: torch.fx.Graph) -> list[tuple[Node, ModuleEffects]]:
    """The module calls of ``graph`` that may write state, with their effects: within :func:`attributes_fixed`,
    found once while the graph's module calls are the same ones (nothing changes a module's training flag or
    hooks while ``apply`` rewrites a graph, and a graph module it calls is no graph it rewrites then)."""
    calls = graph.find_nodes(op="call_module")
    scope = _SCOPE.get()
    cached = scope.writers.get(graph) if scope is not None else None
    if cached is not None and cached[0] == calls:
        return cached[1]
    writers = [(call, effects) for call in calls for effects in (_effects_of_call(call),) if effects.state]
    if scope is not None:
        scope.writers[graph] = (calls, writers)
    return writers


def same_memory_attributes(node: Node) -> list[Node]:
    """The other ``get_attr`` nodes of ``node``'s graph that read memory ``node``'s reads: the same attribute
    (a graph may read it more than once), or the same tensor or a view of its memory under another name (a tied
    weight); a write through one is a write into the others."""
    index = _attribute_index(node.graph)
    path = str(node.target)
    root = index.roots[path] if path in index.roots else _root_of(index.owner, path)
    found = dict.fromkeys(index.by_path.get(path, ()))
    if root is not None:
        found.update(dict.fromkeys(index.by_root.get(id(root), ())))
    found.pop(node, None)
    return list(found)


@attrs.frozen
class _AttributeIndex:
    """A graph's ``get_attr`` nodes by the attribute they read and by the tensor whose memory that is."""

    owner: torch.nn.Module | None
    nodes: list[Node]  # as ``find_nodes`` listed them when the index was made
    roots: dict[str, torch.Tensor | None]  # path -> the tensor whose memory it reads (None: no tensor); kept alive
    by_path: dict[str, list[Node]]
    by_root: dict[int, list[Node]]  # id of a root in ``roots`` -> the nodes reading its memory


@attrs.frozen
class _Scope:
    """What :func:`attributes_fixed` keeps per graph: its attribute index, and its module calls that write state
    (with the module calls they were found among)."""

    indexes: dict[torch.fx.Graph, _AttributeIndex] = attrs.Factory(dict)
    writers: dict[torch.fx.Graph, tuple[list[Node], list[tuple[Node, ModuleEffects]]]] = attrs.Factory(dict)


#: While :func:`attributes_fixed` holds, what it keeps; None outside.
_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("fxrules_attribute_scope", default=None)


@contextlib.contextmanager
def attributes_fixed() -> Iterator[None]:
    """While the body runs, the owning modules' attributes change only as their graphs' ``get_attr`` nodes do
    (``apply``'s rewrites register a tensor only for a new ``get_attr`` of it; helpers see modules read-only):
    a graph's attribute index is made once and kept while its ``get_attr`` nodes stay the same ones, and its
    module calls that write state while its module calls do.  Outside, both are found at every question: the
    caller may reassign an attribute or set a module training between two."""
    token = _SCOPE.set(_Scope())
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _attribute_index(graph: torch.fx.Graph) -> _AttributeIndex:
    """The index of ``graph``'s ``get_attr`` nodes: kept within :func:`attributes_fixed` while the graph's
    ``get_attr`` nodes are exactly those it was made of (the same nodes in the same order; a rewrite makes new
    ``get_attr`` nodes and erases some, and retargets none), which makes each question cost a list comparison,
    not an attribute lookup per node."""
    nodes, owner = graph.find_nodes(op="get_attr"), graph.owning_module
    scope = _SCOPE.get()
    cached = scope.indexes.get(graph) if scope is not None else None
    if cached is not None and cached.owner is owner and cached.nodes == nodes:
        return cached
    index = _AttributeIndex(owner, nodes, {}, {}, {})
    for other in nodes:
        path = str(other.target)
        if path not in index.roots:
            index.roots[path] = _root_of(owner, path)
        index.by_path.setdefault(path, []).append(other)
        root = index.roots[path]
        if root is not None:
            index.by_root.setdefault(id(root), []).append(other)
    if scope is not None:
        scope.indexes[graph] = index
    return index


def _root_of(owner: torch.nn.Module | None, path: str) -> torch.Tensor | None:
    value = _attribute(owner, path)
    return _root(value) if isinstance(value, torch.Tensor) else None


def _writes_attribute(call: Node, effects: ModuleEffects, attribute: Node) -> bool:
    """Whether ``call`` may write what ``attribute`` reads: a path it writes, or below one (``bn`` writes
    ``bn.running_mean``), or a tensor it writes under another name (a tied weight, a view of a buffer); any
    attribute for a call that runs code fxrules cannot read."""
    if effects.anything:
        return True
    if not effects.state:
        return False
    path = str(attribute.target)
    written = [_below(str(call.target), state) for state in effects.state]
    if any(path == full or path.startswith(f"{full}.") for full in written):
        return True
    value = _attribute(attribute.graph.owning_module, path)
    if not isinstance(value, torch.Tensor):
        return False
    root = _root(value)
    return any(_root(tensor) is root for full in written
               for tensor in _tensors_under(_attribute(attribute.graph.owning_module, full)))


def _attribute(owner: torch.nn.Module | None, path: str) -> Any:
    try:
        return operator.attrgetter(path)(owner)
    except AttributeError:
        return None


def _tensors_under(value: Any) -> list[torch.Tensor]:
    """A tensor, or every tensor a module holds: parameters, buffers and plain tensor attributes, its
    submodules' too."""
    if isinstance(value, torch.Tensor):
        return [value]
    if not isinstance(value, torch.nn.Module):
        return []
    return [tensor for module in value.modules()
            for tensor in (*module._parameters.values(), *module._buffers.values(), *vars(module).values())
            if isinstance(tensor, torch.Tensor)]


def _root(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor whose memory ``tensor`` views (itself when it is no view)."""
    return tensor._base if tensor._base is not None else tensor
