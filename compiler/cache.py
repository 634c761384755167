"""Where fusecc keeps files it can always rebuild (parser tables, compiled
kernels): `$FUSECC_CACHE_DIR`, else `~/.cache/fusecc`."""

from __future__ import annotations

import os
import pathlib


def cache_dir(*parts: str) -> pathlib.Path | None:
    """The cache folder (or a subfolder), created on demand; None when it
    cannot be created, in which case callers simply do not cache."""
    root = os.environ.get("FUSECC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "fusecc")
    path = pathlib.Path(root, *parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return path
