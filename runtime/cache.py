"""An on-disk cache for compiled artefacts (CPU-harness libraries, cubins).

Entries are files named by a digest of everything that determines them
(source, compiler version, flags, architecture), so a stale entry is never
found, only left behind. Writers take a lock file, build into a temporary
name and `os.replace` it, so concurrent processes (pytest-xdist workers, two
`fusecc run`s) never see half a file and build each entry once.

The root is $FUSECC_CACHE_DIR, else $XDG_CACHE_HOME/fusecc, else
~/.cache/fusecc: outside the repository.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


def cache_root() -> Path:
    if explicit := os.environ.get("FUSECC_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fusecc"


def cache_dir(kind: str, root: str | os.PathLike | None = None) -> Path:
    path = (Path(root) if root is not None else cache_root()) / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:32]


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`.lock while building `path`."""
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
