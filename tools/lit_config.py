"""lit + FileCheck for your own golden tests of fusecc programs.

    python -m fusecc.tools.lit_config init tests/      # writes tests/lit.cfg.py
    lit tests/                                           # the 'lit' command of the lit package

A test is an .ir (or .mlir) file with RUN lines, as in MLIR:

    // RUN: %fusecc-opt %s --canonicalize --cse | FileCheck %s
    // RUN: %roundtrip | FileCheck %s
    // CHECK-LABEL: func.func @main

Substitutions: %fusecc-opt, %fusecc (the tools of the Python that runs lit),
%roundtrip (print generic, parse, print custom: `%fusecc-opt --print-generic %s
| %fusecc-opt`), %python, and FileCheck (the `filecheck` package, for RUN lines
written for LLVM's FileCheck). Your lit.cfg.py may add its own after
`configure(config)`.
"""

from __future__ import annotations

import os
import sys

LIT_CFG = '''\
# lit configuration for fusecc golden tests (written by python -m fusecc.tools.lit_config init).
from fusecc.tools.lit_config import configure

configure(config, __file__)
'''


def _tool(module: str) -> str:
    return f'"{sys.executable}" -m {module}'


def substitutions() -> list[tuple[str, str]]:
    """In the order lit must apply them: longer names before their prefixes."""
    opt = _tool("fusecc.tools.opt")
    return [
        ("%roundtrip", f"{opt} --print-generic %s | {opt}"),
        ("%fusecc-opt", opt),
        ("%fusecc", _tool("fusecc.tools.fusecc")),
        ("%python", f'"{sys.executable}"'),
        ("FileCheck", _tool("filecheck")),
    ]


def configure(config, cfg_file: str | None = None, name: str = "fusecc-user-tests") -> None:
    """Set up a lit suite of .ir/.mlir tests in the folder of `cfg_file`."""
    import lit.formats

    config.name = name
    config.test_format = lit.formats.ShTest(execute_external=False)
    config.suffixes = [".ir", ".mlir"]
    if cfg_file is not None:
        config.test_source_root = os.path.dirname(os.path.abspath(cfg_file))
    config.excludes = ["inputs", "Output", "lit.cfg.py"]
    bin_dir = os.path.dirname(sys.executable)
    config.environment["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    for variable in ("HOME", "TMPDIR", "PYTHONPATH", "FUSECC_CACHE_DIR"):
        if variable in os.environ:
            config.environment[variable] = os.environ[variable]
    config.substitutions.extend(substitutions())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "init":
        print("usage: python -m fusecc.tools.lit_config init FOLDER   (writes FOLDER/lit.cfg.py; then run: lit FOLDER)", file=sys.stderr)
        return 1
    path = os.path.join(argv[1], "lit.cfg.py")
    if os.path.exists(path):
        print(f"{path} exists; not overwritten", file=sys.stderr)
        return 1
    os.makedirs(argv[1], exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(LIT_CFG)
    print(f"wrote {path}; run: lit {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
