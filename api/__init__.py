"""fusecc: an MLIR-style multi-level tensor compiler with operator fusion.

This module is the public Python API (`import fusecc`). Its names are
loaded on first use, so that importing a submodule such as
`fusecc.compiler` does not pull in the driver and the backends.
"""

from __future__ import annotations

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("fusecc")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
