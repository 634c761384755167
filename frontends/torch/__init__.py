"""The PyTorch front end: aten-level FX graphs (after Dynamo + AOT
decompositions, or a `torch.export` program) -> tensor-dialect modules.

context.py holds the builder, locations and dtypes; table.py + ops_*.py
translate aten ops; importer.py walks a graph; partition.py splits one into translatable islands; exported.py reads a
`torch.export` program (weights as named constants). Importing this package
imports torch; `fusecc.frontends` alone does not.
"""

from fusecc.frontends.torch.context import Unsupported
from fusecc.frontends.torch.decompositions import decompositions
from fusecc.frontends.torch.exported import import_exported
from fusecc.frontends.torch.importer import INPUT_NAMES_ATTR, OUTPUT_NAMES_ATTR, ImportedGraph, import_graph, input_problems, is_size_input, tensor_array, unsupported_nodes
from fusecc.frontends.torch.partition import split_translatable
from fusecc.frontends.torch.table import supported_ops

__all__ = ["decompositions", "ImportedGraph", "INPUT_NAMES_ATTR", "OUTPUT_NAMES_ATTR", "Unsupported", "import_exported", "import_graph", "input_problems", "is_size_input", "split_translatable", "tensor_array",
           "supported_ops", "unsupported_nodes"]
