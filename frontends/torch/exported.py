"""A `torch.export` program -> tensor IR: parameters, buffers and lifted
constants become `tensor.constant`s named after their state-dict keys (so
`save_module` writes them to the .safetensors as resources under those
names); user inputs become the function's arguments."""

from __future__ import annotations

import numpy as np
import torch

from fusecc.frontends.torch.context import Unsupported
from fusecc.frontends.torch.decompositions import decompositions
from fusecc.frontends.torch.importer import ImportedGraph, import_graph, tensor_array, unsupported_nodes


def import_exported(program: "torch.export.ExportedProgram") -> ImportedGraph:
    """Decompose to the core aten ops and translate. Raises Unsupported
    listing every op type without a translation."""
    from torch.export.graph_signature import InputKind

    program = program.run_decompositions(decompositions())
    state = [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind != InputKind.USER_INPUT]
    missing = unsupported_nodes(program.graph, state)
    if missing:
        raise Unsupported(", ".join(u.op for u in missing), "no translation to the tensor dialect", missing[0].location)
    constants: dict[str, np.ndarray] = {}
    user_inputs: list[str] = []
    for spec in program.graph_signature.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            user_inputs.append(name)
            continue
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            raise Unsupported("input", f"export input '{name}' of kind {spec.kind.name} is not supported")
        value = program.state_dict.get(spec.target) if spec.target in program.state_dict else program.constants.get(spec.target)
        if not isinstance(value, torch.Tensor):
            raise Unsupported("input", f"export input '{spec.target}' is a {type(value).__name__}, not a tensor")
        constants[name] = tensor_array(value, spec.target)
    imported = import_graph(program.graph_module, user_inputs, constants, constant_names=_state_names(program))
    return imported


def _state_names(program) -> dict[str, str]:
    """Placeholder name -> the state-dict key it holds (`fc1.weight`)."""
    return {spec.arg.name: spec.target for spec in program.graph_signature.input_specs if spec.target}


__all__ = ["import_exported"]
