"""The undo log of one ``apply`` on one graph: every change to the graph and its module, undone in place.

``apply`` rewrites the graph itself, not a copy, so that a failure anywhere (an
exception, a ``KeyboardInterrupt`` between any two steps) can put it back: every
change goes through a :class:`Transaction`, which records what it needs to undo
the change *before* making it.  That covers the rewrite (nodes created, uses
redirected, attributes a helper added) and the commit (nodes erased as dead code,
the generated code of every ``GraphModule``, submodules and buffers deleted).

Undoing is written to work from any state a change can be interrupted in: a node
half created or half erased is recognised by what FX did to it so far (its place
in the node list, the graph's ``find_nodes`` table, the names the graph's
namespace handed out), not by what the log says was done.  FX keeps those in
private attributes, which only this module touches.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import torch
import torch.fx
from torch.fx.graph import _FindNodesLookupTable, _illegal_char_regex, _illegal_names, _name_regex, _Namespace
from torch.fx.immutable_collections import immutable_dict
from torch.fx.node import _fx_map_arg

from fxrules.rewrite.spelling import spell_publicly

#: Attributes ``GraphModule.recompile`` sets on the module and on its own class (each GraphModule has one).
_CODE_ATTRIBUTES = ("_code", "_lineno_map", "_prologue_start", "_in_spec", "_out_spec")
_CODE_CLASS_ATTRIBUTES = ("forward", "__call__", "_wrapped_call")
_ABSENT = object()
_REPR_FUNCTION = operator.attrgetter("_repr_fn")
_ARGS, _KWARGS = operator.attrgetter("_args"), operator.attrgetter("_kwargs")  # what Node.args, .kwargs return
_USERS = operator.attrgetter("users")
_SET_ERASED: Callable[[torch.fx.Node, bool], None] = vars(torch._C._NodeBase)["_erased"].__set__
_NONE: Callable[[torch.fx.Node], None] = dict[torch.fx.Node, None]().get  # None for any node, and no Python frame
_NODE = torch.fx.Node  # read per node on the hot paths below: one global, not three lookups


def first_free(name: str, taken: set[str] | Callable[[str], bool]) -> str:
    """``name``, or ``name_1``, ``name_2``... : the first that is not taken."""
    is_taken = taken.__contains__ if isinstance(taken, set) else taken
    candidate, number = name, 0
    while is_taken(candidate):
        number += 1
        candidate = f"{name}_{number}"
    return candidate


@attrs.define
class _Names:
    """The graph's namespace before the first change: the names later nodes will get depend on it.

    The names taken (one per node: thousands) are not copied while every name is taken by :func:`_create_plain`,
    which names its node before it takes the name: the names taken since the first mark are then those of the
    objects named since (FX appends each to ``_obj_to_name``), whatever an interruption left.  They are copied
    (:meth:`keep`) before anything else may take one: FX's own ``create_node`` (its hooks, or an interruption
    between its steps, may leave a name no object has), a helper, a hook.  A rollback frees the names of the
    objects named since the first mark, from the copy as it was taken if there is one."""

    counters: dict[str, int]
    associated: int  # how many objects had names: FX appends each new node's name at the end
    used: set[str] | None = None  # the names taken, once something but _create_plain may take one

    def keep(self, namespace: _Namespace) -> None:
        """Copy the names taken (the first time): something but :func:`_create_plain` may take one next."""
        if self.used is None:
            self.used = set(namespace._used_names)


#: How ``_Namespace.create_name`` takes a candidate apart, found once per candidate (a function of it alone):
#: the candidate made an identifier, its base and number (None: it has none), and whether it is a keyword or
#: builtin (``_illegal_names``).
_Stem = tuple[str, str, str | None, bool]


def _stem(candidate: str) -> _Stem:
    """The steps of ``_Namespace.create_name(candidate, None)`` that depend on ``candidate`` alone, in FX's words."""
    match = _name_regex.match(candidate)
    if match is None:
        candidate = _illegal_char_regex.sub("_", candidate) or "_unnamed"
        if candidate[0].isdigit():
            candidate = f"_{candidate}"
        match = _name_regex.match(candidate)
        if match is None:
            raise AssertionError(f"Name regex failed to match candidate: {candidate}")
    base, number = match.group(1, 2)
    return candidate, base, number, _illegal_names.get(candidate, None) is not None


#: A node the commit erased, and where and how it was, to put it back: (node, previous, args, kwargs, sort
#: key); a plain tuple, one is made for every node the commit erases.
_Erased = tuple[torch.fx.Node, torch.fx.Node, tuple[Any, ...], dict[str, Any], Any]


def erase_node(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """``graph.erase_node(node)`` for a graph whose module has no erase hooks, less FX's Python-level overhead.

    FX's own steps, in FX's order, so that an erasure interrupted anywhere leaves a state
    :meth:`Transaction.rollback` recognises, as FX's would: the node leaves its ``find_nodes`` bucket,
    then the node list; it is marked erased (by the descriptor ``Node.__setattr__`` ends with: the rest
    of that method moves a node within the table, and the node has left it); the graph's length drops;
    the nodes in its arguments become None (``map_arg``'s C function, given a C function for it), so
    each of them loses it as a user.  A node FX would refuse or warn about (used, of another graph,
    erased already), or of a subclass of ``Node``, goes to ``graph.erase_node`` itself."""
    if node.users or node.graph is not graph or node._erased or type(node) is not _NODE:
        graph.erase_node(node)
        return
    op = node.op
    graph._find_nodes_lookup_table.table[op, node.target if op == "call_function" else None].pop(node)
    node._remove_from_list()
    _SET_ERASED(node, True)
    graph._len -= 1
    node._update_args_kwargs(_fx_map_arg(node._args, _NONE), _fx_map_arg(node._kwargs, _NONE))


_FX_CREATE_NODE = vars(torch.fx.Graph)["create_node"]  # FX's own, which _create_plain follows step by step
#: Argument types with no part to look into: a value of exactly one of them is neither a container nor a symbolic
#: size (``torch.SymInt`` and its kin derive from none of them, and an exact type check admits no subclass).
_PLAIN_ARGUMENT = frozenset({torch.fx.Node, int, float, bool, str, type(None), torch.dtype, torch.device,
                             torch.layout, torch.memory_format})


def _plain_graph(graph: torch.fx.Graph) -> bool:
    """Whether :func:`_create_plain` makes the very node ``graph.create_node`` would of arguments each of a
    :data:`_PLAIN_ARGUMENT` type: the graph's own ``create_node`` is FX's (not a subclass's, nor patched on the
    class or the graph), so its steps are the ones ``_create_plain`` takes, its namespace and ``find_nodes``
    table are FX's own classes (whose two steps ``_create_plain`` takes inline), and its module has no
    create-node hooks."""
    return getattr(graph.create_node, "__func__", None) is _FX_CREATE_NODE \
        and type(graph._graph_namespace) is _Namespace \
        and type(graph._find_nodes_lookup_table) is _FindNodesLookupTable \
        and not getattr(graph._owning_module, "_create_node_hooks", None)


def _create_plain(graph: torch.fx.Graph, op: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                  stem: _Stem) -> torch.fx.Node:
    """``graph.create_node(op, target, args, kwargs, name=name)`` in a :func:`_plain_graph`, of a tuple and a dict
    of arguments each of a :data:`_PLAIN_ARGUMENT` type (``stem``: ``_stem(name)``).

    FX's steps in FX's order, less one, and the name taken last: the scan of the arguments' leaves for a raw
    ``SymInt``/``SymFloat``/``SymBool`` is left out, which only warns about one.  Exact: every argument is a leaf
    of a plain type (no container to look into), so that scan finds nothing; the create-node hooks FX would run
    are none (an empty list or no attribute).  Three of FX's steps are taken inline, as FX's own classes take
    them: ``create_name`` (the steps that depend on the candidate alone taken once per candidate, :func:`_stem`),
    ``associate_name_with_obj`` (its check that the node was not named already cannot fail for a node just made)
    and the ``find_nodes`` table's ``insert``.  The name FX's ``create_name`` would return is found first and
    taken (``_used_names``, ``_base_count``) once the node has it (``_obj_to_name``): whatever an interruption
    leaves, the names a rollback frees are those of the objects named since its mark (:class:`_Names`)."""
    namespace = graph._graph_namespace
    used = namespace._used_names
    candidate, base, number, illegal = stem
    if number is None or candidate in used:
        count = namespace._base_count.get(base, 0)
        if illegal:
            count += 1
            candidate = f"{base}_{count}"
    else:
        count = int(number)
    while candidate in used:
        count += 1
        candidate = f"{base}_{count}"
    node = _NODE(graph, candidate, op, target, args, kwargs or immutable_dict(), None)
    namespace._obj_to_name.setdefault(node, candidate)
    used.add(candidate)
    namespace._base_count[base] = count
    graph._insert(node)
    graph._find_nodes_lookup_table.table[op, target if op == "call_function" else None][node] = None
    graph._len += 1
    return node


@attrs.frozen
class _Deleted:
    """A submodule or buffer the commit deleted: its owner, name, value and place among its siblings."""

    owner: torch.nn.Module
    table: str  # "_modules" or "_buffers"
    name: str
    value: Any
    position: int
    persistent: bool


@attrs.define
class Transaction:
    """The undo log of one ``apply`` on one graph module."""

    gm: torch.nn.Module
    added: list[str] = attrs.Factory(list)
    created: list[torch.fx.Node] = attrs.Factory(list)
    # (user, args, kwargs) before a rewrite redirected it: FX replaces args and kwargs, never mutates them;
    # or (users, old, new) of a redirection that is undone by replacing ``new`` with ``old`` again (``users`` a
    # list: the one :meth:`redirect` was given, which may be the users of ``old`` kept in ``users`` below, too)
    redirected: list[tuple[Any, Any, Any]] = attrs.Factory(list)
    retired: dict[torch.fx.Node, None] = attrs.Factory(dict)  # ordered: nodes rewrites left dead, erased at commit
    # existing nodes' users, in order, before the first change to them (FX appends a user it gains back); tuples
    # where this class copies them (freed at once, and a node without users, a new one say, shares the empty one)
    users: dict[torch.fx.Node, Sequence[torch.fx.Node]] = attrs.Factory(dict)
    names: _Names | None = None  # taken at the first mark
    # the graph's insertion point at the first mark: a rewrite moves it before its anchor for a while, and an
    # interrupt there would leave it moved (later nodes, even the graph's output, would go there)
    insert: Callable[..., None] | None = None
    # target -> the name Graph.create_node would base a new node's on (Graph._target_to_str, a function of the
    # target alone), found once per target: given as ``name``, create_node makes the same unique name of it; and
    # its :func:`_stem`, for :func:`_create_plain`
    stems: dict[Any, tuple[str, _Stem]] = attrs.Factory(dict)
    erased: list[_Erased] = attrs.Factory(list)
    # the order of find_nodes buckets (by table and key) before the first change to the graph
    buckets: dict[tuple[Any, Any], list[torch.fx.Node]] = attrs.Factory(dict)
    code: list[tuple[torch.fx.GraphModule, dict[str, Any], dict[str, Any]]] | None = None
    # each graph's nodes and their _repr_fn, which code generation sets (two lists: no tuple made per node)
    reprs: list[tuple[list[torch.fx.Node], list[Any]]] = attrs.Factory(list)
    deleted: list[_Deleted] = attrs.Factory(list)
    transformers: list[tuple[Any, Any]] = attrs.Factory(list)  # (code generator, its transformer before)

    # ------------------------------------------------------------------ the rewrite's changes

    def fresh_name(self, base: str) -> str:
        stem = "".join(c if c.isalnum() or c == "_" else "_" for c in base).strip("_") or "fxrules"
        return first_free(stem, lambda name: hasattr(self.gm, name) or name in self.added)

    def add_module(self, base: str, module: torch.nn.Module) -> str:
        name = self.fresh_name(base)
        self.added.append(name)  # first: the name is free, so deleting it undoes a half-done add
        self.gm.add_module(name, module)
        return name

    def add_buffer(self, base: str, tensor: torch.Tensor) -> str:
        name = self.fresh_name(base)
        self.added.append(name)
        self.gm.register_buffer(name, tensor)
        return name

    def mark(self, graph: torch.fx.Graph) -> tuple[int, int]:
        """Where the log stands, for :meth:`undo_since` (a rewrite that is skipped halfway).  Every change
        comes after a mark: the first one also keeps the graph's namespace, for :meth:`rollback`."""
        if self.names is None:
            self.insert = graph._insert
            self._keep_buckets(graph)
            namespace = graph._graph_namespace
            self.names = _Names(dict(namespace._base_count), len(namespace._obj_to_name))
            module = graph._owning_module
            # a hook (of any kind) may take a name whenever it runs, a namespace or create_node of a graph's own
            # does not name as _create_plain does, and a graph class's own methods (inserting_before...) may name
            if type(graph) is not torch.fx.Graph or not _plain_graph(graph) \
                    or getattr(module, "_replace_hooks", None) or getattr(module, "_erase_node_hooks", None):
                self.names.keep(namespace)
        return len(self.created), len(self.added)

    def keep_names(self, graph: torch.fx.Graph) -> None:
        """Before something but :func:`_create_plain` may name an object in ``graph`` (a helper, FX's own
        ``create_node``...): the names taken are copied, if they were not (:class:`_Names`)."""
        if self.names is not None:
            self.names.keep(graph._graph_namespace)

    def create_node(self, graph: torch.fx.Graph, op: str, target: Any, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> torch.fx.Node:
        """``graph.create_node`` at the insertion point, logged; the users of its inputs are kept first."""
        stems = self.stems.get(target)
        if stems is None:
            name = graph._target_to_str(target)
            stems = self.stems[target] = name, _stem(name)
        if type(args) is tuple and type(kwargs) is dict and _plain_graph(graph) and self._kept_plain(args) \
                and (not kwargs or self._kept_plain(kwargs.values())):
            node = _create_plain(graph, op, target, args, kwargs, stems[1])
        else:
            torch.fx.node.map_arg((args, kwargs), self.keep_users)
            self.keep_names(graph)
            node = graph.create_node(op, target, args, kwargs, name=stems[0])
        self.created.append(node)
        return node

    def _kept_plain(self, values: Iterable[Any]) -> bool:
        """Whether each of ``values`` is of a :data:`_PLAIN_ARGUMENT` type, the users of the nodes among them
        kept (those up to the first that is not, if one is: the caller keeps them all then, as they stay)."""
        kept = self.users
        for value in values:
            kind = type(value)
            if kind is _NODE:
                if value not in kept:
                    kept[value] = tuple(value.users)
            elif kind not in _PLAIN_ARGUMENT:
                return False
        return True

    def get_attr(self, graph: torch.fx.Graph, name: str) -> torch.fx.Node:
        self.keep_names(graph)
        node = graph.get_attr(name)
        self.created.append(node)
        return node

    def redirect(self, old: torch.fx.Node, new: Any, users: list[torch.fx.Node]) -> None:
        """``user.replace_input_with(old, new)`` for each of ``users`` (some of the users of ``old``, in their order;
        the list is the log's from then on: the caller does not change it), each logged before it changes."""
        if not users:
            return
        kept = self.users
        # keep_users of every input of each user: changing a node's arguments, and setting them back at a
        # rollback, moves it to the end of the users of each of its inputs.  ``old`` is kept once, here; a user
        # whose one input is ``old`` (most users) has nothing more to keep, so its inputs are not walked
        if old not in kept:
            # all of its users (nearly every output), in order: ``users`` is that list, kept as it is (no copy)
            kept[old] = users if len(users) == len(old.users) else tuple(old.users)
        hooked = getattr(old.graph._owning_module, "_replace_hooks", None)
        # undone by replacing ``new`` with ``old`` again (:meth:`_undo_redirected`) if no user has ``new`` among
        # its inputs yet and each is a plain ``Node`` (FX's own ``_replace_input_with``, which hooks do not
        # precede); otherwise each user's arguments are logged as they are
        is_node = isinstance(new, _NODE)
        invertible = is_node and new is not old and not hooked
        if is_node:
            if new not in kept:
                kept[new] = tuple(new.users)
        else:  # a list or tuple of nodes gains the users as well (a literal has no node in it)
            torch.fx.node.map_arg(new, self.keep_users)
        for user in users:
            inputs = user._input_nodes
            # else a plain node whose one input is ``old``: nothing more to keep, and ``new`` is not an input
            if len(inputs) != 1 or old not in inputs or type(user) is not _NODE:
                for used in inputs:
                    if used not in kept:
                        kept[used] = tuple(used.users)
                # ``new`` asked of a node only: a literal may not be hashable
                if invertible and (type(user) is not _NODE or new in inputs):
                    invertible = False
        # logged all at once before the first change: undoing one that did not change sets what it has
        if invertible:
            self.redirected.append((users, old, new))
        else:
            self.redirected += zip(users, map(_ARGS, users), map(_KWARGS, users), strict=True)
        if hooked:
            self.keep_names(old.graph)  # a hook may name something
            for user in users:
                user.replace_input_with(old, new)  # calls the module's replace hooks first
            return
        for user in users:  # replace_input_with without replace hooks: the C function it ends with
            user._replace_input_with(old, new)

    def keep_users(self, node: torch.fx.Node) -> torch.fx.Node:
        if node not in self.users:
            self.users[node] = tuple(node.users)
        return node

    def _keep_buckets(self, graph: torch.fx.Graph) -> None:
        """Keep the order of every ``find_nodes`` bucket of ``graph`` (the first time): FX moves a node to the
        end of its bucket whenever one of its attributes is set (``Node.__setattr__``), its arguments too."""
        table = graph._find_nodes_lookup_table
        for key, bucket in table.table.items():
            if (table, key) not in self.buckets:  # kept already: not copied again only to be dropped
                self.buckets[table, key] = list(bucket)

    def undo_since(self, mark: tuple[int, int], graph: torch.fx.Graph) -> None:
        """Erase the nodes and attributes made since ``mark``, newest first (nothing outside uses them yet),
        and free the nodes' names: erasing a node keeps its name taken."""
        created, added = mark
        if getattr(graph._owning_module, "_erase_node_hooks", None):  # a hook may name something
            self.keep_names(graph)
        used_names = graph._graph_namespace._used_names
        for node in reversed(self.created[created:]):
            graph.erase_node(node)
            used_names.discard(node.name)
        del self.created[created:]
        for name in reversed(self.added[added:]):
            _delete_attribute(self.gm, name)
        del self.added[added:]

    # ------------------------------------------------------------------ the commit's changes

    def erase_dead(self, graph: torch.fx.Graph, removable: Callable[[torch.fx.Node], bool]) -> None:
        """Erase, last to first, every node nothing uses that is retired or that ``removable`` allows (it is
        not asked of a retired node), as ``Graph.eliminate_dead_code`` does, logging each before it goes."""
        self._keep_buckets(graph)
        kept, erased, retired = self.users, self.erased, self.retired
        # a module's erase hooks (a GraphTransformObserver's, say) are run by FX's own erase_node
        hooked = getattr(graph.owning_module, "_erase_node_hooks", None)
        erase = graph.erase_node if hooked else functools.partial(erase_node, graph)
        # the nodes without users, filtered in C as the walk reaches each (so one whose last user was erased
        # just before is among them, as in a loop asking each node): most nodes have users
        for node in itertools.filterfalse(_USERS, reversed(graph.nodes)):
            if node not in retired and not removable(node):  # most dead nodes are retired: no call for them
                continue
            # what .all_input_nodes, .args and .kwargs return, without their Python calls and list
            for used in node._input_nodes:
                if used not in kept:  # keep_users, inlined
                    kept[used] = list(used.users)
            erased.append((node, node._prev, node._args, node._kwargs, node._sort_key))
            erase(node)
        retired.clear()  # erased: each retired node's users are retired, and come after it

    def recompile(self, gm: torch.fx.GraphModule) -> None:
        """``gm.recompile()``, which recompiles every GraphModule under ``gm``; their generated code is kept
        first (the first time), and so is what code generation sets on each node of their graphs (its repr
        function, through ``Node.__setattr__``, which moves the node in its ``find_nodes`` bucket).  Their code
        is generated with public names from then on (:func:`spell_publicly`)."""
        if self.code is not None:
            gm.recompile()
            return
        modules = [module for module in gm.modules() if isinstance(module, torch.fx.GraphModule)]
        self.code = [(module, {key: module.__dict__.get(key, _ABSENT) for key in _CODE_ATTRIBUTES},
                      {key: vars(type(module)).get(key, _ABSENT) for key in _CODE_CLASS_ATTRIBUTES})
                     for module in modules]
        for module in modules:
            self._keep_buckets(module.graph)
            nodes = list(module.graph.nodes)
            self.reprs.append((nodes, list(map(_REPR_FUNCTION, nodes))))
        self.transformers = [(m.graph._codegen, m.graph._codegen._body_transformer) for m in modules]
        for module in modules:
            spell_publicly(module.graph)
        gm.recompile()

    def delete_submodule(self, gm: torch.fx.GraphModule, target: str) -> None:
        """``gm.delete_submodule(target)``, logged."""
        owner_path, _, name = target.rpartition(".")
        self._keep_deleted(gm.get_submodule(owner_path), "_modules", name)
        gm.delete_submodule(target)

    def delete_buffer(self, name: str) -> None:
        """Delete a buffer of the module itself, logged."""
        self._keep_deleted(self.gm, "_buffers", name)
        delattr(self.gm, name)

    def _keep_deleted(self, owner: torch.nn.Module, table: str, name: str) -> None:
        entries = getattr(owner, table)
        if name not in entries:  # not a submodule: deleting it changes nothing
            return
        position = list(entries).index(name)
        self.deleted.append(_Deleted(owner, table, name, entries[name], position,
                                     name not in owner._non_persistent_buffers_set))

    # ------------------------------------------------------------------ undoing

    def rollback(self, graph: torch.fx.Graph) -> None:
        """Undo everything, newest first: the graph, its nodes (their users in order), the module's code,
        submodules and buffers are as they were before ``apply``, down to the names later nodes will get."""
        self._restore_deleted()
        self._restore_code()
        self._restore_erased(graph)
        self._undo_redirected()
        self._discard_created(graph)
        for node, users in self.users.items():
            if node._erased:  # made by the rewrite, discarded
                continue
            node.users.clear()
            node.users.update(dict.fromkeys(users))
        for (table, key), order in self.buckets.items():  # as when it was kept, but the nodes made since
            table.table[key].clear()
            table.table[key].update((node, None) for node in order if not node._erased)
        own = graph._find_nodes_lookup_table
        if self.buckets:  # a bucket the rewrite opened for a new kind of node goes too
            for key in [key for key, bucket in own.table.items() if not bucket and (own, key) not in self.buckets]:
                del own.table[key]
        self._restore_names(graph)
        graph._len = sum(1 for _ in graph.nodes)
        if self.insert is not None:
            graph._insert = self.insert
        for name in reversed(self.added):
            _delete_attribute(self.gm, name)
        self.added.clear()
        self.created.clear()
        self.redirected.clear()
        self.retired.clear()
        self.users.clear()
        self.buckets.clear()

    def _undo_redirected(self) -> None:
        """Give every redirected user its arguments before the redirection, newest redirection first.

        A user logged with its arguments gets them back.  The users of an invertible redirection, logged as
        (users, old, new), get ``new`` replaced with ``old`` by FX's C function.  Exact: each is a plain
        ``Node`` that had no ``new`` among its inputs (checked before the redirection) and no replace hook ran,
        so, once every later change is undone, ``new`` stands exactly where ``old`` stood (FX's replacement
        walks the arguments as ``_input_nodes`` does); a user an interrupt came before still has ``old`` and
        no ``new``, so replacing changes nothing.  FX rebuilds the containers of the arguments however they
        are set, so both ways give equal arguments; the users of every node and the find_nodes buckets are
        put back in order afterwards."""
        for entry in reversed(self.redirected):
            if type(entry[0]) is list:
                users, old, new = entry
                for user in reversed(users):
                    user._replace_input_with(new, old)
            else:
                node, args, kwargs = entry
                node.args, node.kwargs = args, kwargs

    def _restore_deleted(self) -> None:
        for deleted in reversed(self.deleted):
            entries = getattr(deleted.owner, deleted.table)
            if deleted.name in entries:  # interrupted before it went
                continue
            items = list(entries.items())
            items.insert(deleted.position, (deleted.name, deleted.value))
            entries.clear()
            entries.update(items)
            if deleted.table == "_buffers" and not deleted.persistent:
                deleted.owner._non_persistent_buffers_set.add(deleted.name)
        self.deleted.clear()

    def _restore_code(self) -> None:
        for module, attributes, class_attributes in reversed(self.code or ()):
            for key, value in attributes.items():
                if value is _ABSENT:
                    module.__dict__.pop(key, None)
                else:
                    module.__dict__[key] = value
            cls = type(module)
            for key, value in class_attributes.items():
                if value is not _ABSENT:
                    setattr(cls, key, value)
                elif key in vars(cls):
                    delattr(cls, key)
        for nodes, repr_functions in self.reprs:
            for node, repr_function in zip(nodes, repr_functions, strict=True):
                if node._repr_fn is not repr_function:
                    node._repr_fn = repr_function
        for codegen, transformer in self.transformers:
            codegen._body_transformer = transformer
        self.code = None
        self.reprs.clear()
        self.transformers.clear()

    def _restore_erased(self, graph: torch.fx.Graph) -> None:
        """Put the erased nodes back, last erased first, from wherever their erasure stopped."""
        table = graph._find_nodes_lookup_table
        for node, previous, args, kwargs, sort_key in reversed(self.erased):
            if node not in table:
                table.insert(node)
            if previous._next is not node:
                previous.append(node)  # its stale links still name its neighbours: unlinking them is a no-op
            node._erased = False
            node._sort_key = sort_key
            node.args, node.kwargs = args, kwargs
        self.erased.clear()

    def _discard_created(self, graph: torch.fx.Graph) -> None:
        """Take out every node made since the first mark, newest first, however far its making got: those
        the log names, and those the namespace has named since (made but not logged yet)."""
        created = dict.fromkeys(self.created)
        if self.names is not None:
            named = itertools.islice(graph._graph_namespace._obj_to_name, self.names.associated, None)
            created.update((n, None) for n in named if isinstance(n, torch.fx.Node) and n.graph is graph)
        table = graph._find_nodes_lookup_table
        for node in reversed(created):
            if node._erased:
                continue
            if node in table:
                table.remove(node)
            if node._prev is not node and node._prev._next is node:
                node._remove_from_list()
            node._erased = True
            node.args, node.kwargs = (), {}  # its inputs lose it as a user (their order is restored after)

    def _restore_names(self, graph: torch.fx.Graph) -> None:
        if self.names is None:
            return
        namespace = graph._graph_namespace
        namespace._base_count.clear()
        namespace._base_count.update(self.names.counters)
        used = namespace._used_names
        if self.names.used is not None:  # as when they were copied
            used.clear()
            used.update(self.names.used)
        # less the names of the objects named since the first mark: those names were taken since (:class:`_Names`)
        associated = namespace._obj_to_name
        for obj in list(itertools.islice(associated, self.names.associated, None)):
            used.discard(associated[obj])
            del associated[obj]
        self.names = None


def _delete_attribute(gm: torch.nn.Module, name: str) -> None:
    if name in gm._modules:
        del gm._modules[name]
    elif name in gm._buffers:
        del gm._buffers[name]
