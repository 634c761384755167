"""fusecc's example programs, shipped with the package (fusecc/examples in a
wheel): the tensor programs (*.ir) the README and the tests use, and host
programs that run generated CUDA (host/).

    python -m fusecc.examples            # where they are, and what
"""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def programs() -> list[Path]:
    """The example tensor programs, by name."""
    return sorted(FOLDER.glob("*.ir"))
