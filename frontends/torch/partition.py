"""Splitting a graph that fusecc cannot translate whole: islands of nodes the
op table translates become submodules (`fused_0`, `fused_1`, ...) that the
backend compiles; the other nodes stay in the outer graph and run in eager.
torch's CapabilityBasedPartitioner forms the islands (largest groups without
dependency cycles); a lone supported node between unsupported ones stays in
eager, where one op costs no more than a fusecc call."""

from __future__ import annotations

import operator

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from fusecc.frontends.torch.context import op_name
from fusecc.frontends.torch.table import handler_for


def constant_nodes(graph: torch.fx.Graph, constants=()) -> set:
    """Nodes computed from constants alone: attributes, the placeholders named
    in `constants` (frozen weights) and what only they feed. Such a node
    needs no translation: without one it is evaluated at import time."""
    known: set = set()
    for node in graph.nodes:
        if (node.op == "get_attr" or node.op == "placeholder" and node.name in constants
                or node.op == "call_function" and all(n in known for n in node.all_input_nodes)):
            known.add(node)
    return known


class Translatable(OperatorSupportBase):
    def __init__(self, graph: torch.fx.Graph, constants=()):
        self.known = constant_nodes(graph, constants)

    def is_node_supported(self, submodules, node) -> bool:
        if node.op != "call_function":
            return False
        if node in self.known or isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return True  # folded, or a size: an expression, no op
        if node.target is operator.getitem:  # an element of a supported node's tuple
            source = node.args[0]
            return isinstance(source, torch.fx.Node) and self.is_node_supported(submodules, source)
        return handler_for(op_name(node)) is not None


def split_translatable(graph_module: torch.fx.GraphModule, constants=()) -> tuple[torch.fx.GraphModule, list[str]]:
    """`graph_module` with its translatable islands as submodules (the module
    is changed in place), and their names; no islands: ([], unchanged).
    `constants`: names of placeholders frozen to their values."""
    support = Translatable(graph_module.graph, constants)
    partitioner = CapabilityBasedPartitioner(graph_module, support, allows_single_node_partition=False)
    partitions = partitioner.propose_partitions()
    if not partitions:
        return graph_module, []
    fused = partitioner.fuse_partitions(partitions)
    names = [n.target for n in fused.graph.nodes if n.op == "call_module" and isinstance(getattr(fused, n.target), torch.fx.GraphModule)]
    return fused, names


__all__ = ["Translatable", "constant_nodes", "split_translatable"]
