"""Rewriting a ``torch.export`` program: its graph, then a new, consistent ``ExportedProgram``.

An exported graph receives parameters, buffers and tensor constants as
inputs ("lifted"), so a helper could not read their values, and a helper's
new tensor (a folded weight) has to become an input too.  So the program is
rewritten on a copy of its graph module in three steps:

1. *unlift*: every lifted input that no output mutates becomes a ``get_attr``
   of its value, which rules and helpers see as in a traced module;
2. :func:`fxrules.apply` on that module, marked as requiring aten operators
   (:data:`fxrules.rewrite.aten.ATEN_GRAPH`: every replacement operation is
   spelled as one, or the rewrite is skipped);
3. *lift*: every tensor ``get_attr`` becomes an input again, before the user
   inputs: the original ones under their original spec, helper-made ones as
   new buffers; inputs the rewrite left unused are dropped with their
   state-dict or constant entries.

The new program is built by ``ExportedProgram._update``, which runs
torch.export's own verifier, so a graph or signature torch.export would not
accept is an error here, not later.  The input program is not changed.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
import warnings
from collections.abc import Callable
from typing import Any

import attrs
import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)

from fxrules.diagnostics import FxrApplyError
from fxrules.engine.report import Report
from fxrules.graph.subgraphs import NO_NEW_TENSORS, higher_order_subgraphs
from fxrules.rewrite.aten import ATEN_GRAPH
from fxrules.rewrite.transaction import first_free

_LIFTED = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


@attrs.frozen
class RewrittenProgram:
    """The program :func:`rewrite_program` made, and the report of the rewrite."""

    program: ExportedProgram
    report: Report


def rewrite_program(program: ExportedProgram, run: Callable[[torch.fx.GraphModule], Report]) -> RewrittenProgram:
    """Unlift a copy of ``program``'s graph, rewrite it with ``run`` (an ``apply``), lift it into a new program."""
    gm = copy.deepcopy(program.graph_module)
    input_specs = _restore_placeholder_names(gm, program)
    unlifted = _unlift(gm, program, input_specs)
    subgraphs = higher_order_subgraphs(gm)
    for path, subgraph, _ in subgraphs:
        subgraph.meta[NO_NEW_TENSORS] = (f"'{path}' is the subgraph of a higher-order operator, and an exported "
                                         "program takes tensors only as inputs of its root graph")
    for module in (gm, *(subgraph for _, subgraph, _ in subgraphs)):
        module.meta[ATEN_GRAPH] = ()  # torch.export's verifier accepts aten operators only; none decomposed
    try:
        report = run(gm)
    finally:  # the restrictions hold while rewriting this program, not for what is made of the result
        for _, subgraph, _ in subgraphs:
            del subgraph.meta[NO_NEW_TENSORS]
        for module in (gm, *(subgraph for _, subgraph, _ in subgraphs)):
            del module.meta[ATEN_GRAPH]
    if not report.total_fired:
        return RewrittenProgram(program, report)
    try:
        signature, state_dict, constants = _lift(gm, program, input_specs, unlifted)
        with warnings.catch_warnings():  # _update copies pytree specs, which warn about torch's own LeafSpec
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            rewritten = program._update(gm, signature, state_dict=state_dict, constants=constants)
    except Exception as error:  # torch.export's verifier, or a graph the lift could not make valid
        raise FxrApplyError(f"the rewritten program is not a valid ExportedProgram: {error}") from error
    return RewrittenProgram(rewritten, report)


@attrs.frozen
class _Unlifted:
    """A lifted input turned into an attribute: its spec, and its placeholder (kept, unused, until the lift)."""

    spec: InputSpec
    placeholder: torch.fx.Node
    was_used: bool


def _restore_placeholder_names(gm: torch.fx.GraphModule, program: ExportedProgram) -> list[InputSpec]:
    """Give the copy's placeholders the program's names again (copying renames ``input``, a builtin); the specs."""
    specs = program.graph_signature.input_specs
    for spec, node in zip(specs, gm.graph.find_nodes(op="placeholder"), strict=True):
        name = getattr(spec.arg, "name", None)
        if name is not None and node.name != name:
            node.name = node.target = name  # as torch.export names them; code generation aliases builtins
    return list(specs)


def _unlift(gm: torch.fx.GraphModule, program: ExportedProgram, input_specs: list[InputSpec]) -> dict[str, _Unlifted]:
    """Read unmutated lifted inputs through ``get_attr`` nodes instead; attribute name -> what it was."""
    mutated = {spec.target for spec in program.graph_signature.output_specs
               if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION)}
    placeholders = {node.name: node for node in gm.graph.find_nodes(op="placeholder")}
    first_computation = next(n for n in gm.graph.nodes if n.op != "placeholder")
    unlifted: dict[str, _Unlifted] = {}
    for spec in input_specs:
        if spec.kind not in _LIFTED or spec.target in mutated or not isinstance(spec.arg, TensorArgument):
            continue
        placeholder = placeholders[spec.arg.name]
        name = first_free(spec.arg.name, lambda candidate: hasattr(gm, candidate))
        gm.register_buffer(name, _value(program, spec))
        with gm.graph.inserting_before(first_computation):
            attribute = gm.graph.get_attr(name)
        attribute.meta.update(placeholder.meta)
        unlifted[name] = _Unlifted(spec, placeholder, bool(placeholder.users))
        placeholder.replace_all_uses_with(attribute)
    return unlifted


def _lift(gm: torch.fx.GraphModule, program: ExportedProgram, input_specs: list[InputSpec],
          unlifted: dict[str, _Unlifted]) -> tuple[ExportGraphSignature, dict[str, Any], dict[str, Any]]:
    """Turn tensor ``get_attr`` nodes back into inputs; the new signature, state dict and constants."""
    graph = gm.graph
    reads: dict[str, list[torch.fx.Node]] = {}
    for node in graph.find_nodes(op="get_attr"):
        if isinstance(operator.attrgetter(str(node.target))(gm), torch.Tensor):
            reads.setdefault(str(node.target), []).append(node)
    specs = {spec.arg.name: spec for spec in input_specs}
    values: dict[str, torch.Tensor] = {}
    taken_targets = {spec.target for spec in input_specs if spec.target} | set(program.state_dict) \
        | set(program.constants)
    fake_mode = _fake_mode(graph)
    for name in [*unlifted, *sorted(n for n in reads if n not in unlifted)]:
        value = operator.attrgetter(name)(gm)
        if name in unlifted:
            target = unlifted[name].spec.target
            assert target is not None  # a lifted input names the state it reads
            values[target] = value
            placeholder = unlifted[name].placeholder
            if unlifted[name].was_used and name not in reads:  # the rewrite made it unused: drop the input
                graph.erase_node(placeholder)
                del specs[placeholder.name]
        else:  # a helper's tensor: a new buffer of the program
            target = first_free(name, taken_targets)
            taken_targets.add(target)
            with _before_user_inputs(graph, specs):
                placeholder = graph.placeholder(first_free(f"b_{target}", {n.name for n in graph.nodes}))
            placeholder.meta.update(reads[name][0].meta)
            if "val" not in placeholder.meta and fake_mode is not None:
                placeholder.meta["val"] = fake_mode.from_tensor(value, static_shapes=True)
            specs[placeholder.name] = InputSpec(InputKind.BUFFER, TensorArgument(placeholder.name), target, True)
            values[target] = value
        for node in reads.get(name, ()):
            node.replace_all_uses_with(placeholder)
            graph.erase_node(node)
        delattr(gm, name)
    graph.lint()
    gm.recompile()
    input_specs = [specs[n.name] for n in graph.find_nodes(op="placeholder")]
    state_dict, constants = _state(program, input_specs, values)
    return ExportGraphSignature(input_specs, _output_specs(graph, program)), state_dict, constants


def _before_user_inputs(graph: torch.fx.Graph, specs: dict[str, InputSpec]) -> Any:
    """Where a new lifted input goes: before the first user input, else after the last input, else first."""
    placeholders = graph.find_nodes(op="placeholder")
    first_user_input = next((n for n in placeholders if specs[n.name].kind is InputKind.USER_INPUT), None)
    if first_user_input is not None:
        return graph.inserting_before(first_user_input)
    return graph.inserting_after(placeholders[-1]) if placeholders else graph.inserting_before(None)


def _value(program: ExportedProgram, spec: InputSpec) -> torch.Tensor:
    assert spec.target is not None  # a lifted input names the state it reads
    value: torch.Tensor = (program.state_dict if spec.target in program.state_dict else program.constants)[spec.target]
    return value


def _fake_mode(graph: torch.fx.Graph) -> Any:
    from torch._guards import detect_fake_mode

    return detect_fake_mode([n.meta["val"] for n in graph.find_nodes(op="placeholder") if "val" in n.meta])


def _state(program: ExportedProgram, input_specs: list[InputSpec],
           values: dict[str, torch.Tensor]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state dict and constants the inputs need: lifted values as they are now, the rest as before."""
    state_dict: dict[str, Any] = {}
    constants = {name: value for name, value in program.constants.items() if not isinstance(value, torch.Tensor)}
    for spec in input_specs:
        if spec.kind not in _LIFTED:
            continue
        assert spec.target is not None  # a lifted input names the state it reads
        value = values.get(spec.target)
        if value is None:  # lifted and left lifted (a mutated buffer)
            value = _value(program, spec)
        if spec.kind is InputKind.PARAMETER:
            state_dict[spec.target] = value if isinstance(value, torch.nn.Parameter) else \
                torch.nn.Parameter(value, requires_grad=value.requires_grad)
        elif spec.kind is InputKind.BUFFER and spec.persistent:
            state_dict[spec.target] = value
        else:
            constants[spec.target] = value
    return state_dict, constants


def _output_specs(graph: torch.fx.Graph, program: ExportedProgram) -> list[OutputSpec]:
    """The original output specs, naming the values the output node returns now."""
    returned = torch.fx.node.map_aggregate(graph.output_node().args[0], lambda v: v)
    flat = list(returned) if isinstance(returned, list | tuple) else [returned]
    return [_output_spec(spec, value) for spec, value in zip(program.graph_signature.output_specs, flat, strict=True)]


def _output_spec(spec: OutputSpec, value: Any) -> OutputSpec:
    """``spec`` for the value its output returns now: a node's name, or, for a user output a rule replaced by a
    literal (``x * 0 => 0``), that constant, as ``torch.export`` describes a program returning one (and as
    ``apply`` on a traced module returns it).  Anything else stays as it was, for the verifier to judge."""
    if not isinstance(spec.arg, TensorArgument):
        return spec
    if isinstance(value, torch.fx.Node):
        return dataclasses.replace(spec, arg=TensorArgument(value.name))
    if spec.kind is OutputKind.USER_OUTPUT and type(value) in _CONSTANT_OUTPUTS:
        return dataclasses.replace(spec, arg=ConstantArgument(name=spec.arg.name, value=value))
    return spec


#: The types of the values ``ConstantArgument`` holds.
_CONSTANT_OUTPUTS = (int, float, bool, str, type(None))
