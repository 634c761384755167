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


def _grammar_tables(key: str, build) -> bytes:
    """The parser's tables from the runtime's digest-checked cache."""
    from fusecc.runtime.cache import fetch_bytes

    return fetch_bytes("parser", key, build)[0]


def _compose() -> None:
    """The composition root, run once on `import fusecc` (so before any
    submodule): register the dialects with the IR core's op registry, as
    MLIR's tools call `registerAllDialects`, and give the parser the
    runtime's checked cache for its tables. The core itself imports neither."""
    from fusecc.compiler import parser
    from fusecc.dialects import load_all

    load_all()
    parser.set_grammar_store(_grammar_tables)


_compose()


# The public API, loaded on first use (PEP 562): `import fusecc.compiler`
# must not pull in the driver, the passes and the backends.
_LAZY = {
    "compile": "fusecc.driver.program",
    "Program": "fusecc.driver.program",
    "CompileError": "fusecc.driver.program",
    "InputError": "fusecc.driver.input_check",
    "LossyConversionWarning": "fusecc.driver.input_check",
    "parse": "fusecc.compiler.parser",
    "save_module": "fusecc.compiler.resources",
    "from_torch": "fusecc.torch",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fusecc' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(module), "parse_module" if name == "parse" else name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
