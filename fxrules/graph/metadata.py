"""Shape and dtype metadata of FX nodes: reading it, computing it, and carrying it to new nodes.

Metadata comes from ``node.meta["val"]`` (torch.export and AOT put
FakeTensors there), ``node.meta["example_value"]`` (the FakeTensors of a
Dynamo graph, as a ``torch.compile`` backend receives it) or
``node.meta["tensor_meta"]`` (``ShapeProp``).  Guards
and typed captures see it through :class:`TensorInfo`; a node without it
raises :class:`MissingMetadata`, which makes the rule skip with a reason.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import operator
import weakref
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental import _config as symbolic_config
from torch.fx.passes.shape_prop import TensorMetadata, _extract_tensor_metadata

from fxrules.graph import module_effects


class MissingMetadata(Exception):  # noqa: N818 - it is a condition, not a failure
    """A rule needs shape or dtype metadata that the graph does not carry."""


class NotATensor(Exception):  # noqa: N818 - a condition, like MissingMetadata
    """The metadata says the node's value is not a tensor (an int of shape arithmetic, a tuple)."""


class TensorInfo:
    """What guards and types may know about a tensor value: shape, dtype, device."""

    __slots__ = ("computed", "device", "dtype", "mutated", "requires_grad", "shape", "users")

    def __init__(self, shape: Sequence[Any], dtype: torch.dtype, device: torch.device | None,
                 requires_grad: bool = False, users: int | None = None, computed: bool | None = None) -> None:
        self.shape = torch.Size(shape) if all(isinstance(s, int) for s in shape) else tuple(shape)
        self.dtype = dtype
        self.device = device
        self.requires_grad = requires_grad
        self.users = users  # how many graph nodes use this value (None outside a graph)
        self.computed = computed  # made by an operation, not a graph input or attribute (None outside a graph)
        self.mutated: bool | None = None  # changed in place by a user (None outside a graph)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> Any:
        count: Any = 1
        for size in self.shape:
            count = count * size
        return count

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def attribute(self, name: str) -> Any:
        if name in {"shape", "ndim", "dtype", "device", "requires_grad"}:
            return getattr(self, name)
        if name == "is_floating_point":
            return self.dtype.is_floating_point
        raise AttributeError(f"a guard cannot read '.{name}' of a tensor")

    def __repr__(self) -> str:
        return f"TensorInfo(shape={tuple(self.shape)}, dtype={self.dtype})"


class UnknownTensor:
    """A graph value without metadata, as guards see it: ``len(xs)`` and ``x is None`` work, reads do not."""

    __slots__ = ("computed", "mutated", "name", "users")

    def __init__(self, name: str, users: int, computed: bool, mutated: bool) -> None:
        self.name = name
        self.users = users
        self.computed = computed
        self.mutated = mutated

    def attribute(self, name: str) -> Any:
        raise MissingMetadata(f"node '{self.name}' has no shape metadata")


def _from_value(value: Any, users: int | None = None) -> TensorInfo | None:
    if isinstance(value, torch.Tensor):
        return TensorInfo(tuple(value.shape), value.dtype, value.device, value.requires_grad, users)
    if isinstance(value, TensorMetadata):
        return TensorInfo(tuple(value.shape), value.dtype, None, value.requires_grad, users)
    return None


def tensor_info(node: torch.fx.Node, users: int | None = None) -> TensorInfo:
    """The metadata of a tensor-valued node, or :class:`MissingMetadata`; ``users``: its live users, if known."""
    meta = node.meta
    users = len(node.users) if users is None else users
    value = _value(meta)
    info = _from_value(value, users) or _from_value(meta.get("tensor_meta"), users)
    if info is not None:
        return info
    known_type = type(value) if value is not None else meta.get("type")  # ShapeProp records every value's type
    if isinstance(known_type, type) and not issubclass(known_type, torch.Tensor):
        raise NotATensor(f"node '{node.name}' is a {known_type.__name__}, not a tensor")
    raise MissingMetadata(f"node '{node.name}' has no shape metadata")


def mutates_first_argument(node: torch.fx.Node) -> bool:
    """Whether a node changes its first argument in place: ``x.add_(y)``, ``x[i] = y``, a mutating aten op."""
    return _per_target(_target_mutates_first, node)


def _per_target(decide: Callable[[str, Any], bool], node: torch.fx.Node) -> bool:
    """``decide(op, target)``, cached: the aliasing checks ask it for every node near every match (a graph's
    targets are hashable: FX files every node by its target)."""
    return decide(node.op, node.target)


@functools.cache
def _target_mutates_first(op: str, target: Any) -> bool:
    if op == "call_method":
        name = str(target)
        return name == "__setitem__" or (name.endswith("_") and not name.endswith("__"))
    if op != "call_function":
        return False
    if target is operator.setitem:
        return True
    if getattr(target, "__name__", "").endswith("_") and getattr(target, "__module__", None) != "_operator":
        return True  # torch.relu_; not operator.and_ or operator.or_, which write nothing
    schema = getattr(target, "_schema", None)
    return bool(schema is not None and schema.arguments and schema.arguments[0].alias_info is not None
                and schema.arguments[0].alias_info.is_write)


def changes_an_argument(node: torch.fx.Node) -> bool:
    """Whether a node changes its first argument in place (``x.add_(1)``, ``F.relu(x, inplace=True)``, a
    ``nn.ReLU(inplace=True)`` submodule, one whose code fxrules cannot read), which FX's ``Node.is_impure``
    does not see: such a node is not dead when nothing uses its result."""
    if node.op == "call_module":
        return module_effects.changes_first_argument(node)
    return mutates_first_argument(node) or _inplace_argument(node)


def _inplace_argument(node: torch.fx.Node) -> bool:
    """``inplace=True``, by keyword or by position (``F.relu(x, True)``)."""
    if node.kwargs.get("inplace") is True:
        return True
    position = _inplace_position(node.target) if node.op == "call_function" else None
    return position is not None and len(node.args) > position and node.args[position] is True


@functools.cache
def _inplace_position(target: Any) -> int | None:
    try:
        parameters = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return None
    return parameters.index("inplace") if "inplace" in parameters else None


def has_side_effects(node: torch.fx.Node, impure_random: bool = True) -> bool:
    """Whether a node must stay even when nothing uses its result: ``Node.is_impure``, or a write into an
    argument, which ``is_impure`` does not see (``x.add_(1)``)."""
    return node.is_impure(impure_random) or may_write_in_place(node)


# ---------------------------------------------------------------- aliasing: which values share memory

#: Calls whose result may be their input itself although no schema says so: conversions that return
#: ``self`` when nothing changes (``x.float()`` of a float x, ``type_as``), dropout when not training,
#: and indexing and attribute reads (``x[0:1]``, ``x.T``, ``x.data``), which are views.
MAY_RETURN_INPUT = frozenset({
    "type_as", "type", "float", "double", "half", "bfloat16", "int", "long", "short", "char", "byte", "bool",
    "cpu", "cuda", "dropout", "alpha_dropout", "feature_alpha_dropout", "feature_dropout", "dropout1d",
    "dropout2d", "dropout3d", "getitem", "__getitem__", "getattr",
})

#: Modules whose output may be their input or a view of it (besides any module with ``inplace=True``).
ALIASING_MODULES: tuple[type[torch.nn.Module], ...] = (
    torch.nn.Identity, torch.nn.Flatten, torch.nn.Unflatten, torch.nn.modules.dropout._DropoutNd)


@functools.cache
def _returns_alias(name: str) -> bool:
    """Whether the aten operator ``name`` (any overload) returns an alias of its first argument, as its
    schema declares (``view(Tensor(a) self, ...) -> Tensor(a)``): views, and ops that may return a view
    (``reshape``, ``contiguous``, ``to``)."""
    if name in MAY_RETURN_INPUT:
        return True
    packet = getattr(torch.ops.aten, name, None) if name.isidentifier() and not name.startswith("__") else None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    return any(_schema_returns_first_argument(getattr(packet, overload)._schema) for overload in packet.overloads())


def _schema_returns_first_argument(schema: Any) -> bool:
    """``f(Tensor(a) self, ...) -> Tensor(a)``, or a list of views (``split(Tensor(a -> *) self, ...)``)."""
    if not schema.returns or not schema.arguments or schema.arguments[0].alias_info is None:
        return False
    returned, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return bool(returned is not None and returned.before_set & first.before_set) or "*" in first.after_set


@functools.cache
def is_true_view(name: str) -> bool:
    """Whether ``name`` always returns a view (never a copy): an aten view op that functionalization pairs
    with a ``NAME_copy`` operator (``view``, ``t``, ``transpose``, ``expand``, ``select``...), or getitem."""
    if name in ("getitem", "__getitem__", "detach"):
        return True
    return _returns_alias(name) and hasattr(torch.ops.aten, f"{name}_copy")


def _operator_name(op: str, target: Any) -> str | None:
    """The name under which a call's aliasing is looked up; None for an aten overload that returns no alias
    of its first argument (its own schema decides, not its siblings')."""
    schema = getattr(target, "_schema", None) if op == "call_function" else None
    if schema is not None and not _schema_returns_first_argument(schema):
        return None
    return _plain_name(op, target)


def _plain_name(op: str, target: Any) -> str | None:
    if op == "call_method":
        return str(target)
    if op != "call_function":
        return None
    schema = getattr(target, "_schema", None)
    return schema.name.split("::")[-1] if schema is not None else getattr(target, "__name__", None)


#: :func:`_plain_name` per (op, target): :func:`view_base` asks it of every step of every chain.
_cached_plain_name = functools.cache(_plain_name)


def aliased_inputs(node: torch.fx.Node) -> tuple[torch.fx.Node, ...]:
    """The argument nodes whose memory the node's result may share: the input of a view (``x.t()``,
    ``x[0:1]``, ``x.reshape(...)``), of an in-place write (``x.add_(1)`` returns ``x``), of a module that
    may return its input (``nn.Identity``, ``nn.Dropout``), and an ``out=`` tensor."""
    found = [out] if isinstance(out := node.kwargs.get("out"), torch.fx.Node) else []
    first = node.args[0] if node.args else node.kwargs.get("input", node.kwargs.get("self"))
    if isinstance(first, torch.fx.Node) and _may_return_first(node):
        found.append(first)
    elif isinstance(first, (tuple, list)) and node.target is operator.getitem:
        found += nodes_of(first)  # an item of a sequence a rewrite put in place of a node: (x, y)[0] is x
    return tuple(found)


def _may_return_first(node: torch.fx.Node) -> bool:
    op = node.op
    if op == "call_module":
        return module_effects.may_return_first(node)
    returns, position = _or_inplace_position(_target_may_return_first, op, node.target)
    return returns or node.kwargs.get("inplace") is True \
        or (position is not None and len(node.args) > position and node.args[position] is True)


@functools.cache
def _or_inplace_position(decide: Callable[[str, Any], bool], op: str, target: Any) -> tuple[bool, int | None]:
    """``decide(op, target)``, and when it is False, where the call's ``inplace`` parameter is: with the node's
    arguments, what :func:`_inplace_argument` or ``decide`` would say, decided once per (op, target)."""
    if decide(op, target):
        return True, None
    return False, _inplace_position(target) if op == "call_function" else None


@functools.cache
def _target_may_return_first(op: str, target: Any) -> bool:
    """Whether a call of ``target`` may return its first argument, whatever its arguments: it writes into it,
    or it returns a view of it."""
    if _target_mutates_first(op, target):
        return True
    name = _operator_name(op, target)
    return name is not None and _returns_alias(name)


def alias_class(node: torch.fx.Node) -> dict[torch.fx.Node, None]:
    """Every node whose value may share memory with ``node``'s: its bases and every view of them, through
    chains of views (``a.t()[0:1].view(-1)``), in both directions, and the other reads of an attribute.
    Conservative: two views of one base are in one class even where they do not overlap."""
    found = {node: None}
    stack = [node]
    while stack:
        current = stack.pop()
        kwargs = current.kwargs  # aliased_inputs(current), inlined: the hot loop of every aliasing check
        out = kwargs.get("out")
        if isinstance(out, torch.fx.Node) and out not in found:
            found[out] = None
            stack.append(out)
        args = current.args
        first = args[0] if args else kwargs.get("input", kwargs.get("self"))
        if isinstance(first, torch.fx.Node):
            if first not in found and _may_return_first(current):
                found[first] = None
                stack.append(first)
        elif isinstance(first, (tuple, list)) and current.target is operator.getitem:  # (x, y)[0]: as above
            for item in nodes_of(first):
                if item not in found:
                    found[item] = None
                    stack.append(item)
        for user in current.users:
            if user not in found and _result_aliases(user, current):
                found[user] = None
                stack.append(user)
        if current.op == "get_attr":  # another read of the same attribute (or tensor) is the same memory
            for other in module_effects.same_memory_attributes(current):
                if other not in found:
                    found[other] = None
                    stack.append(other)
    return found


def _result_aliases(user: torch.fx.Node, node: torch.fx.Node) -> bool:
    """``node in aliased_inputs(user)``, without building the tuple: asked of every user of every alias."""
    kwargs = user.kwargs
    if kwargs.get("out") is node:
        return True
    args = user.args
    first = args[0] if args else kwargs.get("input", kwargs.get("self"))
    if first is node:
        return _may_return_first(user)
    # (x, y)[0], where a rewrite replaced a node by a sequence: the item is the node itself
    return isinstance(first, (tuple, list)) and user.target is operator.getitem and node in nodes_of(first)


def writes_into(user: torch.fx.Node, node: torch.fx.Node) -> bool:
    """Whether ``user`` changes ``node`` in place: as any argument it writes into (:func:`written_values`)."""
    kwargs, args = user.kwargs, user.args
    out = kwargs.get("out")
    if node is out or (args and args[0] is node and changes_an_argument(user)):
        return True  # the usual writes, without building a list
    if isinstance(out, list | tuple) or (args and isinstance(args[0], list | tuple)):
        return any(value is node for value in written_values(user))
    if user.op == "call_function":
        return any(value is node for value in _declared_written(user))
    return user.op == "call_module" and any(value is node for value in module_effects.written_by(user))


def written_values(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The argument nodes a call writes into in place: its first argument when it changes it (``x.add_(1)``; each
    tensor of a list, ``torch._foreach_add_([x], 1)``), its ``out=`` tensors (one, or a tuple: ``torch.sort(x,
    out=(values, indices))``), and every other argument its operator's schema declares written
    (``_native_batch_norm_legit``'s running statistics, ``max.dim_max``'s ``max=``), batch norm's running
    statistics among them (``F.batch_norm(x, mean, var, training=True)``; its schema does not say so)."""
    args = node.args
    found = _nodes_in(node.kwargs.get("out"))
    if args and changes_an_argument(node):
        found += _nodes_in(args[0])
    if node.op == "call_module":  # the arguments and the state of the module it may write
        return found + module_effects.written_by(node)
    return found + _declared_written(node) if node.op == "call_function" else found


def _declared_written(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes a function call gives the parameters :func:`_written_parameters` names."""
    declared, statistics = _written_parameters(node.target)
    if not declared and statistics is None:  # nearly every call
        return []
    args, kwargs = node.args, node.kwargs
    if statistics is not None and _argument(args, kwargs, statistics.flag) is not False:
        declared += statistics.written
    return [value for parameter in declared for value in _nodes_in(_argument(args, kwargs, parameter))]


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], parameter: _Parameter) -> Any:
    """The value a call gives ``parameter``: by position, else by keyword, else its default."""
    position, name, default = parameter
    return args[position] if position is not None and position < len(args) else kwargs.get(name, default)


def _nodes_in(value: Any) -> list[torch.fx.Node]:
    """``value`` if it is a node, the nodes of a list or tuple of them."""
    if isinstance(value, torch.fx.Node):
        return [value]
    return [item for item in value if isinstance(item, torch.fx.Node)] if isinstance(value, list | tuple) else []


#: A parameter: its position (None for a keyword-only one), name and default (None when it has none).
_Parameter = tuple[int | None, str, Any]


@attrs.frozen
class _RunningStatistics:
    """Where a normalization writes its running statistics in place, and the flag under which it does."""

    flag: _Parameter  # ``training`` (batch norm), ``use_input_stats`` (instance norm)
    written: tuple[_Parameter, ...]


#: Calls that update their ``running_mean`` and ``running_var`` in place (when training, or using the input's
#: statistics), which their schemas do not declare.
_RUNNING_STATISTICS = frozenset({"batch_norm", "instance_norm", "native_batch_norm", "_batch_norm_impl_index",
                                 "cudnn_batch_norm", "miopen_batch_norm"})


@functools.cache
def _written_parameters(target: Any) -> tuple[tuple[_Parameter, ...], _RunningStatistics | None]:
    """The parameters a function call writes into: those its aten schemas (all overloads' when the target is a
    packet or a torch function) declare written, and a normalization's running statistics.  Nothing for nearly
    every target."""
    schemas = _aten_schemas(target)
    declared = dict.fromkeys((None if argument.kwarg_only else position, argument.name, None)
                             for schema in schemas for position, argument in enumerate(schema.arguments)
                             if argument.alias_info is not None and argument.alias_info.is_write)
    statistics = None
    if _plain_name("call_function", target) in _RUNNING_STATISTICS:
        parameters = {name: (position, name, default)
                      for position, (name, default) in enumerate(_parameters(target, schemas))}
        flag = parameters.get("training", parameters.get("use_input_stats"))
        written = tuple(parameters[name] for name in ("running_mean", "running_var") if name in parameters)
        statistics = _RunningStatistics(flag, written) if flag is not None and written else None
    return (tuple(declared), statistics) if declared or statistics is not None else _NOTHING


#: What :func:`_written_parameters` finds for nearly every target.
_NOTHING: tuple[tuple[_Parameter, ...], _RunningStatistics | None] = ((), None)


def _aten_schemas(target: Any) -> list[Any]:
    """An aten overload's schema; every overload's of a packet, or of the aten operator a torch function (whose
    module is torch's, ``torch.batch_norm``) is named after."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return [schema]
    packet = target
    if not isinstance(target, torch._ops.OpOverloadPacket):
        name, module = getattr(target, "__name__", None), getattr(target, "__module__", None) or ""
        from_torch = module == "torch" or module.startswith("torch.")
        packet = getattr(torch.ops.aten, name, None) if from_torch and isinstance(name, str) \
            and name.isidentifier() and not name.startswith("__") else None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return []
    return [getattr(packet, overload)._schema for overload in packet.overloads()]


def _parameters(target: Any, schemas: list[Any]) -> list[tuple[str, Any]]:
    """A call's parameters in order, (name, default; True, where a flag would be, when it has none): its Python
    signature's, else its first schema's (an aten overload's Python signature is ``*args, **kwargs``)."""
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        parameters = None
    if parameters is not None and not (schemas and all(p.kind in _VARIADIC for p in parameters.values())):
        return [(name, True if parameter.default is inspect.Parameter.empty else parameter.default)
                for name, parameter in parameters.items()]
    return [(argument.name, argument.default_value if argument.has_default_value() else True)
            for argument in schemas[0].arguments] if schemas else []


_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def may_write_in_place(node: torch.fx.Node) -> bool:
    """Whether a node changes any of its arguments in place: every writer :func:`in_place_writer` finds is one."""
    op = node.op
    writing = None if op == "call_module" else writing_arguments(op, node.target)
    if writing is not None:  # nearly every node: its target's writes decided once, its arguments read here
        if writing[0] is None and not node._kwargs:  # most of them: no keyword, no inplace position (as below)
            return False
        return _writes_by_arguments(node, writing)
    kwargs = node.kwargs
    out = kwargs.get("out")
    if (out is not None and _nodes_in(out)) or changes_an_argument(node):
        return True
    if op == "call_module":
        return module_effects.may_write(node)
    return op == "call_function" and bool(_declared_written(node))


#: How a call may write where only its arguments decide (:func:`writing_arguments`): the position of its ``inplace``
#: parameter, the keywords that write into the nodes they are given.
Writing = tuple[int | None, tuple[str, ...]]


def _writes_by_arguments(node: torch.fx.Node, writing: Writing) -> bool:
    """:func:`may_write_in_place` of a call whose target writes only where its arguments say so
    (:func:`writing_arguments` is not None).  Reads the slots behind ``Node.args`` and ``Node.kwargs`` (a
    property call each): asked of the nodes of every rewrite."""
    position, keywords = writing
    if position is not None:
        args = node._args
        if len(args) > position and args[position] is True:
            return True
    kwargs = node._kwargs
    if not kwargs:
        return False
    if kwargs.get("inplace") is True:
        return True
    for name in keywords:  # noqa: SIM110 - a loop: any() would add a generator for each call with keywords
        if name in kwargs and _nodes_in(kwargs[name]):
            return True
    return False


class GraphEffects:
    """What one ``apply`` knows of the side effects and the returned values of one graph while it rewrites it.

    * The nodes that may change an argument in place (:func:`may_write_in_place`), so that
      :func:`in_place_writer` need not search the aliases of a value in a graph that has none (most graphs):
      found at the first question; whoever changes the graph after that tells it of each node it creates or
      gives other arguments (:meth:`noticed`).  A node erased since stays listed: a writer too many costs a
      search, never a wrong answer.
    * The nodes that may share memory with a value the graph returns: the alias classes of the returned values,
      found at the first question; every rewrite is told to it before it happens (:meth:`rewriting`, which
      answers), and the classes it joins are added.  Again a superset: a node too many
      costs the full check of the rewrite that asks about it, never a wrong answer.
    * :func:`has_side_effects`, with ``Node.is_impure`` of a function or method call decided once per target
      (but a higher-order operator's, which depends on its arguments), with how the target may write in place
      (:func:`writing_arguments`): which functions are impure is torch's registry, which nothing changes
      while a graph is rewritten (torch decides a method call's purity by its op alone).
    """

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        self._writers: list[torch.fx.Node] | None = None  # None: not walked yet
        self._returned: dict[torch.fx.Node, None] | None = None  # None: not found yet
        #: (op, target, impure_random) of a function or method call -> is_impure, writing_arguments
        self._calls: dict[tuple[str, Any, bool], tuple[bool, Writing | None]] = {}

    def noticed(self, nodes: Iterable[torch.fx.Node]) -> None:
        """``nodes`` were created, or given other arguments (a write may have become one: ``inplace=True``)."""
        if self._writers is not None:
            self._writers += [node for node in nodes if may_write_in_place(node)]

    def created_writers(self, writers: list[torch.fx.Node]) -> None:
        """``writers`` were created, each of which :func:`may_write_in_place` (:meth:`noticed`, for a caller that
        asked already)."""
        if self._writers is not None:
            self._writers += writers

    def writers_exist(self) -> bool:
        """Whether the graph may hold an in-place writer."""
        if self._writers is None:
            self._writers = _writers(self.graph)
        return bool(self._writers)

    def writers_between(self, first: Any, last: Any) -> bool:
        """Whether the graph may hold an in-place writer strictly between two places (``Node._sort_key``s)."""
        if self._writers is None:
            self._writers = _writers(self.graph)
        return any(first < writer._sort_key < last for writer in self._writers)

    def rewriting(self, replaced: Sequence[torch.fx.Node], values: Sequence[Any],
                  created: Sequence[torch.fx.Node]) -> Container[torch.fx.Node]:
        """The nodes that may share memory with a value the graph returns (a node not among them has no returned
        value in its :func:`alias_class`), now and once each of ``replaced`` is replaced by its value (a node or a
        literal) for all its users, ``created`` made for them.

        That replacement makes the users of a replaced node that were views of it views of its value, joining
        the two classes; a new node has joined those of its inputs already; and the value of a returned node
        becomes returned (each node of a sequence, ``(x, y)``).  Were none of these nodes in a returned class
        before, the classes they join hold no returned value either; else each is added as it is now (what it
        will be joined with is among them)."""
        returned = self._returned
        if returned is None:  # the first question: the classes as they are now, this rewrite added below
            returned = self._returned = _returned_aliases(self.graph)
        if not created and len(replaced) == 1 and isinstance(values[0], torch.fx.Node):  # most rewrites: x * 1 => x
            # exact: all _joins_returned asks of one output, one node for it and no new node (its loops of the
            # new nodes and their inputs are empty), without its call
            joins = replaced[0] in returned or values[0] in returned
        else:
            joins = _joins_returned(returned, replaced, values, created)
        if joins:
            for node in (*replaced, *created, *nodes_of(values)):
                returned.update(alias_class(node))
        return returned

    def impure_calls(self, nodes: Iterable[torch.fx.Node]) -> bool:
        """Whether ``Node.is_impure(False)`` holds for one of ``nodes``, function and method calls of no
        higher-order operator (each target's purity found once)."""
        return any(self._known(node, False)[0] for node in nodes)

    def has_side_effects(self, node: torch.fx.Node, impure_random: bool = True) -> bool:
        """:func:`has_side_effects`."""
        op = node.op
        if op not in ("call_function", "call_method"):
            return has_side_effects(node, impure_random)
        impure, writing = self._known(node, impure_random)
        if impure:
            return True
        return may_write_in_place(node) if writing is None else _writes_by_arguments(node, writing)

    def _known(self, node: torch.fx.Node, impure_random: bool) -> tuple[bool, Writing | None]:
        """``Node.is_impure`` and :func:`writing_arguments` of a function or method call, found once per target."""
        op, target = node.op, node.target
        key = (op, target, impure_random)
        known = self._calls.get(key)
        if known is None:
            known = (node.is_impure(impure_random), writing_arguments(op, target))
            if not isinstance(target, torch._ops.HigherOrderOperator):  # (a slow isinstance: asked once)
                self._calls[key] = known  # else its arguments decide whether it is impure: asked each time
        return known


def _writers(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The nodes :func:`may_write_in_place` says write, in no particular order.  The graph files its function
    calls by target and its method calls together (``find_nodes``): how the targets of a group write is decided
    once for the group, and where only a keyword, or an argument at an ``inplace`` position, can make a call
    write (nearly every target), only the calls with keywords, or with an argument there, are asked."""
    found: list[torch.fx.Node] = []
    for (op, target), nodes in graph._find_nodes_lookup_table.table.items():
        position = _group_inplace_position(op, target, nodes)
        if position is _BY_ITSELF:  # a target that writes by itself (``add_``), a module...: each call is asked
            found += [node for node in nodes if may_write_in_place(node)]
        elif position is None:  # only a keyword can make one write (exact: :func:`_writes_by_arguments`)
            found += [node for node in nodes if node._kwargs and may_write_in_place(node)]
        else:  # or ``True`` at its inplace position (each ``len`` asked only here: it costs)
            found += [node for node in nodes if (node._kwargs or len(node._args) > position)
                      and may_write_in_place(node)]
    return found


#: :func:`_group_inplace_position` of a group of calls whose arguments alone do not decide whether they write.
_BY_ITSELF = -1


def _group_inplace_position(op: str, target: Any, nodes: Iterable[torch.fx.Node]) -> int | None:
    """The first position of an ``inplace`` parameter among the targets of a group of calls the graph files
    under ``(op, target)``, where each of them writes only as its arguments say (:func:`writing_arguments`);
    None if none has one; ``_BY_ITSELF`` where a target may write whatever its arguments (or is no function
    or method)."""
    if op == "call_function":
        targets: Iterable[Any] = (target,)
    elif op == "call_method":
        targets = {node.target for node in nodes}  # a few names for thousands of calls
    else:
        return _BY_ITSELF
    positions = []
    for each in targets:
        writing = writing_arguments(op, each)
        if writing is None:
            return _BY_ITSELF
        if writing[0] is not None:
            positions.append(writing[0])
    return min(positions, default=None)


@functools.cache
def writing_arguments(op: str, target: Any) -> Writing | None:
    """How a call of ``target`` (not a module) may write in place, where only its arguments decide: the position
    of its ``inplace`` parameter, and the keywords (``out``, parameters its schemas declare written and keyword
    only) that write into the nodes they are given; besides ``inplace=True``.  None where the target decides
    more: it changes its first argument, or a parameter its schemas declare written may be given by position,
    or it is a normalization that updates running statistics (:func:`_declared_written`)."""
    mutates, position = _or_inplace_position(_target_mutates_first, op, target)
    declared, statistics = _written_parameters(target) if op == "call_function" else _NOTHING
    if mutates or statistics is not None or any(at is not None for at, _, _ in declared):
        return None
    return position, ("out", *(name for _, name, _ in declared if name != "out"))


def _joins_returned(returned: dict[torch.fx.Node, None], replaced: Sequence[torch.fx.Node], values: Sequence[Any],
                    created: Sequence[torch.fx.Node]) -> bool:
    """Whether a replaced node, a value or a new node, or an input of a new node, is in ``returned`` (asked at
    every rewrite: the nodes of each part looked up in C, ``isdisjoint``, not one by one)."""
    keys = returned.keys()
    if not keys.isdisjoint(replaced) or not keys.isdisjoint(created):
        return True
    for value in values:  # a node in a sequence too: a user `(x, y)[0]` of the replaced node is x
        if isinstance(value, torch.fx.Node):
            if value in returned:
                return True
        elif isinstance(value, (tuple, list)) and not keys.isdisjoint(nodes_of(value)):
            return True
    for node in created:  # noqa: SIM110 - a loop: any() would add a generator at every rewrite
        if not keys.isdisjoint(node._input_nodes):  # its inputs: what all_input_nodes lists, without its copy
            return True
    return False


def nodes_of(value: Any) -> list[torch.fx.Node]:
    """``value`` if it is a node, else the nodes in it, however nested in lists, tuples and dicts."""
    found: list[torch.fx.Node] = []
    torch.fx.node.map_arg(value, found.append)
    return found


def _returned_aliases(graph: torch.fx.Graph) -> dict[torch.fx.Node, None]:
    """The alias classes of the values ``graph`` returns (none when it has no output node)."""
    last = next(iter(reversed(graph.nodes)), None)  # FX keeps the output node last
    found: dict[torch.fx.Node, None] = {}
    if last is not None and last.op == "output":
        for returned in last.all_input_nodes:
            if returned not in found:
                found.update(alias_class(returned))
    return found


def in_place_writer(node: torch.fx.Node) -> torch.fx.Node | None:
    """A node that changes ``node``'s memory in place, directly or through any view or alias of it
    (``x[0:1].zero_()``, ``x.t().add_(1)``, ``y = x.view(-1); y.mul_(2)``), or None."""
    for member in alias_class(node):
        for user in member.users if member.op != "get_attr" else possible_writers(member):
            if writes_into(user, member):
                return user
    return None


def possible_writers(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that may write into ``node`` itself: its users, and for an attribute, the module calls that
    may write it, which need not use it (a training ``nn.BatchNorm1d`` writes its running statistics)."""
    users = list(node.users)
    return users + module_effects.attribute_writers(node) if node.op == "get_attr" else users


def written_in_place(node: torch.fx.Node) -> bool:
    """Whether ``node``'s memory is changed in place by the graph, through any view or alias of it."""
    return in_place_writer(node) is not None


def view_base(node: torch.fx.Node) -> torch.fx.Node:
    """The node ``node`` is certainly a view of, through a chain of views and of calls that return their
    input itself (itself, when it is neither)."""
    while node.args and isinstance(node.args[0], torch.fx.Node) and (
            _is_true_view_node(node) or returns_its_input(node)):
        node = node.args[0]
    return node


def returns_its_input(node: torch.fx.Node) -> bool:
    """Whether the call certainly returns its first argument itself: dropout that is not training
    (``F.dropout(x, p, training=False)``, ``torch.dropout(x, p, False)``, an eval-mode ``nn.Dropout``),
    ``nn.Identity``, and ``x.to(d)`` of an ``x`` whose metadata says it has dtype ``d`` already."""
    if node.op == "call_module":
        module = module_effects.submodule(node)
        return isinstance(module, torch.nn.Identity) or (
            isinstance(module, torch.nn.modules.dropout._DropoutNd) and not module.training)
    name = _cached_plain_name(node.op, node.target)
    if name == "dropout":
        training = node.kwargs.get("training", node.kwargs.get("train", node.args[2] if len(node.args) > 2 else True))
        return training is False
    if name == "to" and len(node.args) == 2 and not node.kwargs and isinstance(node.args[1], torch.dtype):
        try:
            return tensor_info(node.args[0]).dtype == node.args[1]  # type: ignore[arg-type]
        except (MissingMetadata, NotATensor):
            return False
    return False


def _is_true_view_node(node: torch.fx.Node) -> bool:
    return _per_target(_target_is_true_view, node)


@functools.cache
def _target_is_true_view(op: str, target: Any) -> bool:
    if op not in ("call_method", "call_function"):
        return False
    name = _operator_name(op, target)
    return name is not None and is_true_view(name)


def guard_view(node: torch.fx.Node, live_users: list[torch.fx.Node]) -> TensorInfo | UnknownTensor:
    """A node as guards see it: its metadata, or an :class:`UnknownTensor` that fails only when read."""
    computed = node.op not in ("placeholder", "get_attr")
    mutated = written_in_place(node)
    try:
        info = tensor_info(node, len(live_users))
    except (MissingMetadata, NotATensor):
        return UnknownTensor(node.name, len(live_users), computed, mutated)
    info.computed = computed
    info.mutated = mutated
    return info


def _value(meta: dict[str, Any]) -> Any:
    """The (fake) value a node's metadata records, if any."""
    return meta["val"] if "val" in meta else meta.get("example_value")


def has_metadata(node: torch.fx.Node) -> bool:
    return any(key in node.meta for key in ("val", "example_value", "tensor_meta"))


def fake_value(value: Any) -> Any:
    """An argument as operations on metadata see it: a node becomes its FakeTensor or a meta-device tensor."""
    if isinstance(value, torch.fx.Node):
        if "val" in value.meta or "example_value" in value.meta:
            return _value(value.meta)
        tensor_meta = value.meta.get("tensor_meta")
        if isinstance(tensor_meta, TensorMetadata):
            return torch.empty(tensor_meta.shape, dtype=tensor_meta.dtype, device="meta")
        raise MissingMetadata(f"node '{value.name}' has no shape metadata")
    return value


def infer_metadata(node: torch.fx.Node) -> None:
    """Give a new node metadata by running its operation on fake tensors (best effort), never on real values.

    It runs under the fake mode of its inputs' FakeTensors (or of the graph's inputs), recording ``val``;
    in a graph with ``tensor_meta`` only, under a fake mode of its own on FakeTensors made from that
    metadata, recording ``tensor_meta``.  Only a tensor operation runs (:func:`_is_tensor_operation`);
    kernels without a fake implementation are refused, not run on real data.  Where any of that is
    impossible the node simply gets no metadata, as a node of a graph without metadata would.
    """
    if node.op == "get_attr":  # a helper's new tensor: its metadata is its own
        _attribute_metadata(node)
        return
    try:
        mode, records_value = _mode_for(node)
        args = torch.fx.node.map_aggregate(node.args, lambda value: _fake_input(value, mode))
        kwargs = torch.fx.node.map_aggregate(node.kwargs, lambda value: _fake_input(value, mode))
        if not _is_tensor_operation(node, args, kwargs):
            return
        # size-obliviously, as shapes are propagated: a kernel asking whether a symbolic dim is 1 to pick
        # strides gets "no" rather than failing on the guard a rewrite may not add (sizes.fixed)
        # torch adds patch() to its config modules when they are imported, out of sight of its type stubs
        with _without_fallback_kernels(mode), mode, symbolic_config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]
            result = _run(node, args, kwargs)
    except Exception:
        return
    if isinstance(result, torch.Tensor):
        if records_value:
            node.meta["val"] = result
        else:
            node.meta["tensor_meta"] = _extract_tensor_metadata(result)
    elif isinstance(result, tuple | list) and result and all(isinstance(r, torch.Tensor) for r in result):
        # several results (aten.var_mean), read by getitem nodes; torch.export's verifier wants them
        if records_value:
            node.meta["val"] = type(result)(result)
        else:
            node.meta["tensor_meta"] = type(result)(_extract_tensor_metadata(r) for r in result)


def run_on_fake(nodes: Sequence[torch.fx.Node],
                known: Mapping[torch.fx.Node, Any] | None = None) -> dict[torch.fx.Node, Any]:
    """The results of ``nodes`` (in order) run on fake tensors, as :func:`infer_metadata` runs one node: each
    reads the results of those before it, the ``known`` fake values, and any other node's metadata.  Never
    runs anything on real values:
    raises :class:`MissingMetadata` for an input without metadata, ``TypeError`` for a node that is not a tensor
    operation (a module, a Python function) nor an ``operator`` function, and whatever the run raises."""
    results: dict[torch.fx.Node, Any] = dict(known or {})
    if not nodes:
        return results
    mode, _ = _mode_for(nodes[0])

    def argument(value: Any) -> Any:
        return results[value] if isinstance(value, torch.fx.Node) and value in results else _fake_input(value, mode)

    for node in nodes:
        args = torch.fx.node.map_aggregate(node.args, argument)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, argument)
        if not (_is_tensor_operation(node, args, kwargs)
                or (node.op == "call_function" and getattr(node.target, "__module__", None) == "_operator")):
            raise TypeError(f"'{node.name}' is not a tensor operation")
        with _without_fallback_kernels(mode), mode, symbolic_config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]
            results[node] = _run(node, args, kwargs)
    return results


def _mode_for(node: torch.fx.Node) -> tuple[FakeTensorMode, bool]:
    """The fake mode to run a new node under, and whether its result is recorded as ``val`` (the mode is the
    graph's own) or as ``tensor_meta`` (a mode made for the graph, whose FakeTensors nothing else shares)."""
    inputs = [_value(n.meta) for n in node.all_input_nodes]
    mode = _fake_mode(inputs, {}) or _fake_mode([_value(n.meta) for n in node.graph.find_nodes(op="placeholder")], {})
    if mode is not None:
        return mode, True
    own = _MODES.get(node.graph)
    if own is None:
        own = _MODES[node.graph] = FakeTensorMode(allow_fallback_kernels=False)
    return own, False


#: The fake mode made for each graph that carries ``tensor_meta`` only.
_MODES: weakref.WeakKeyDictionary[torch.fx.Graph, FakeTensorMode] = weakref.WeakKeyDictionary()


def _fake_input(value: Any, mode: FakeTensorMode) -> Any:
    """An argument as the fake run sees it: a node becomes its FakeTensor (made from ``tensor_meta`` if need be)."""
    if not isinstance(value, torch.fx.Node):
        if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
            return mode.from_tensor(value, static_shapes=True)
        return value
    recorded = _value(value.meta)
    if recorded is not None:
        return _fake_input(recorded, mode)
    tensor_meta = value.meta.get("tensor_meta")
    if isinstance(tensor_meta, TensorMetadata):
        with mode:
            return torch.empty_strided(tensor_meta.shape, tensor_meta.stride, dtype=tensor_meta.dtype)
    raise MissingMetadata(f"node '{value.name}' has no shape metadata")


def _is_tensor_operation(node: torch.fx.Node, args: Any, kwargs: Any) -> bool:
    """Whether a node's operation only computes on tensors, so running it on fake ones runs nothing else: an
    operator of ``torch.ops``, a native torch function (``torch.ones``), a function or ``Tensor`` method that
    torch dispatches for tensor arguments (``torch.overrides``), or an ``operator`` function given a tensor.
    A Python function a rule names through ``allow=`` is none of these, nor is arithmetic on literals."""
    target = node.target
    if node.op == "call_method":
        return bool(args) and isinstance(args[0], torch.Tensor) \
            and getattr(torch.Tensor, str(target), None) in _tensor_functions()
    if node.op != "call_function":
        return False
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return True
    if getattr(target, "__module__", None) == "_operator":
        return any(isinstance(leaf, torch.Tensor) for leaf in torch.utils._pytree.tree_leaves((args, kwargs)))
    native = getattr(torch._C._VariableFunctions, getattr(target, "__name__", ""), None)
    return native is target or target in _tensor_functions()


@functools.cache
def _tensor_functions() -> frozenset[Any]:
    return frozenset(f for functions in torch.overrides.get_overridable_functions().values() for f in functions)


@contextlib.contextmanager
def _without_fallback_kernels(mode: FakeTensorMode) -> Iterator[None]:
    """A fake mode runs an operator that has no fake implementation on real zeros by default; not here."""
    allowed, mode.allow_fallback_kernels = mode.allow_fallback_kernels, False
    try:
        yield
    finally:
        mode.allow_fallback_kernels = allowed


def _attribute_metadata(node: torch.fx.Node) -> None:
    value = operator.attrgetter(str(node.target))(node.graph.owning_module)
    if not isinstance(value, torch.Tensor):
        return
    fake_mode = _fake_mode([n.meta.get("val") for n in node.graph.find_nodes(op="placeholder")], {})
    if fake_mode is not None:
        node.meta["val"] = fake_mode.from_tensor(value, static_shapes=True)
    else:
        node.meta["tensor_meta"] = _extract_tensor_metadata(value)


def _run(node: torch.fx.Node, args: Any, kwargs: Any) -> Any:
    """A ``call_function`` or ``call_method`` node's operation (:func:`_is_tensor_operation` said which)."""
    target = node.target
    if isinstance(target, str):  # call_method: the name of a method of the first argument
        receiver, *rest = args
        return getattr(receiver, target)(*rest, **kwargs)
    return target(*args, **kwargs)


def _fake_mode(args: Any, kwargs: Any) -> Any:
    found: list[Any] = []

    def collect(value: Any) -> Any:
        found.append(getattr(value, "fake_mode", None))
        return value

    torch.fx.node.map_aggregate((args, kwargs), collect)
    modes = [m for m in found if m is not None]
    return modes[0] if modes else None

