"""Files that a model names: they must stay inside the model's folder.

A model (an `.ir` module naming its resource file, an ONNX model naming
its external data) is input from strangers. The names it holds resolve
inside its own folder: no absolute path, no `..` that climbs out, no
symbolic link that leads elsewhere. A path the user gives on the command
line or to the API is theirs to choose and is not checked here.
"""

from __future__ import annotations

import os
from pathlib import Path


class PathOutsideFolder(ValueError):
    """A file named by a model would lie outside the model's folder."""


def resolve_inside(folder: str | os.PathLike, name: str, what: str = "file") -> Path:
    """`folder / name`, resolved (symbolic links followed), when that lies
    inside `folder`; else PathOutsideFolder saying which rule `name` breaks."""
    if not name or "\x00" in name:
        raise PathOutsideFolder(f"{what} has an empty or invalid name {name!r}")
    if os.path.isabs(name) or Path(name).drive:
        raise PathOutsideFolder(f"{what} '{name}' is an absolute path; a model may only name files inside its folder")
    root = Path(folder).resolve()
    candidate = (root / name).resolve()
    if not candidate.is_relative_to(root):
        reason = "climbs out with '..'" if ".." in Path(name).parts else "is a symbolic link that leads"
        raise PathOutsideFolder(f"{what} '{name}' {reason} outside the model's folder {root}")
    return candidate


def check_declared_size(path: str | os.PathLike, needed: int, what: str = "file") -> int:
    """The size of `path`; ValueError when it holds fewer than `needed` bytes
    (checked before anything is mapped or allocated)."""
    size = os.stat(path).st_size
    if size < needed:
        raise ValueError(f"{what} '{path}' has {size} bytes, but {needed} are declared")
    return size


__all__ = ["PathOutsideFolder", "check_declared_size", "resolve_inside"]
