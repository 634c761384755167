"""What `fusecc run` reads and writes, and what it tells the user.

- Inputs: an .npz is checked to be one before numpy sees it, so a garbage
  file gets a plain message rather than numpy's about pickles; arrays of
  Python objects are refused (nothing is unpickled).
- Results: `-o NAME` writes exactly NAME (through a file object: numpy's
  savez would append .npz to a bare name); every write error, standard
  output included, is a user error (exit 1).
- The summary of what happened (target, compile time and whether the
  cache served it, run time) goes to standard error, so standard output
  and the .npz stay clean.
"""

from __future__ import annotations

import re
import time
import zipfile
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from fusecc.compiler.diagnostics import UsageError
from fusecc.tools.common import write_stdout  # noqa: F401 (run's summary goes through it)

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with entries, an empty zip
NPY_MAGIC = b"\x93NUMPY"


def read_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz by key; plain UsageErrors for everything else."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except FileNotFoundError:
        raise UsageError(f"could not open inputs file '{path}': no such file") from None
    except IsADirectoryError:
        raise UsageError(f"could not open inputs file '{path}': it is a directory") from None
    except OSError as exc:
        raise UsageError(f"could not open inputs file '{path}': {exc.strerror}") from None
    if head.startswith(NPY_MAGIC):
        raise UsageError(f"inputs file '{path}' is a single array (.npy); give an .npz of named arrays (np.savez('{path}.npz', x=x))")
    if not head.startswith(ZIP_MAGIC):
        raise UsageError(f"inputs file '{path}' is not an .npz file (an .npz is a zip archive of arrays, written by np.savez)")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ValueError as exc:
        if "pickle" in str(exc):
            raise UsageError(f"inputs file '{path}' holds an array of Python objects; fusecc reads numeric arrays only") from None
        raise UsageError(f"inputs file '{path}' is a damaged .npz: {exc}") from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise UsageError(f"inputs file '{path}' is a damaged .npz: {exc}") from None


def describe_keys(path: str, provided: Mapping[str, np.ndarray]) -> str:
    """'in.npz' holds a (2x3 float32), b (...) -- for the missing-input message."""
    if not provided:
        return f"'{path}' holds no arrays"
    listed = ", ".join(f"{key} ({'x'.join(map(str, a.shape)) or 'scalar'} {a.dtype})" for key, a in provided.items())
    unnamed = any(re.fullmatch(r"arr_\d+", key) for key in provided)
    hint = " (np.savez(f, a, b) calls unnamed arrays arr_0, arr_1, ...; save them by name: np.savez(f, x=a) or arg0=a)" if unnamed else ""
    return f"'{path}' holds {listed}{hint}"


def write_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write exactly `path` (not path + '.npz'); errors are user errors."""
    try:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    except OSError as exc:
        raise UsageError(f"could not write '{path}': {exc.strerror or exc}") from None


def summary(results: Sequence[tuple[str, np.ndarray]]) -> str:
    lines = []
    for key, r in results:
        flat = np.asarray(r).reshape(-1)
        preview = ", ".join(f"{v:.6g}" if flat.dtype.kind == "f" else str(v) for v in flat[:6])
        lines.append(f"{key}: shape {list(np.shape(r))} {np.asarray(r).dtype} [{preview}{', ...' if flat.size > 6 else ''}]")
    return "".join(line + "\n" for line in lines)


@dataclass
class Timing:
    """Compile and run times of one `fusecc run`, and what the cache did."""

    target: str
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    cache_hits: int = 0
    cache_builds: int = 0

    def line(self) -> str:
        if self.cache_hits + self.cache_builds == 0:
            source = "nothing to compile" if self.target == "reference" else "compiled earlier in this process"
        elif self.cache_builds == 0:
            source = "from the cache"
        elif self.cache_hits == 0:
            source = f"compiled {self.cache_builds} part{'s' * (self.cache_builds != 1)}, now cached"
        else:
            source = f"{self.cache_hits} of {self.cache_hits + self.cache_builds} parts from the cache"
        return f"target {self.target}: compile {seconds(self.compile_seconds)} ({source}), run {seconds(self.run_seconds)}"


def seconds(value: float) -> str:
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


class Stopwatch:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
