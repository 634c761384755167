"""The ONNX front end: `import_onnx(path, shapes) -> ImportedModel`.

loading.py reads and checks a possibly hostile file, folding.py evaluates
what is known at import time, table.py + ops_*.py translate the rest,
importer.py walks the graph, errors.py says what went wrong.
"""

from fusecc.frontends.onnx.errors import ModelError, NodeError, UnsupportedNodes
from fusecc.frontends.onnx.importer import INPUT_NAMES_ATTR, OUTPUT_NAMES_ATTR, ImportedModel, import_onnx
from fusecc.frontends.onnx.loading import parse_budget

__all__ = ["import_onnx", "ImportedModel", "ModelError", "NodeError", "UnsupportedNodes", "INPUT_NAMES_ATTR", "OUTPUT_NAMES_ATTR", "parse_budget"]
