"""Progress on a terminal for work that takes more than about a second.

    for node in progress(nodes, "importing ONNX nodes"):        # a bar
        ...
    with working("compiling 27 CPU kernels (LLVM)"):              # a timer
        ...

Both draw on standard error with tqdm, and only when standard error is a
terminal (FUSECC_PROGRESS=1 forces them on, =0 off) and the work has lasted
`delay` seconds: short runs, pipes, files and tests stay silent. Without
tqdm installed they do nothing. Pure stdlib otherwise, so every level may use it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
DELAY_SECONDS = 1.0


def enabled(stream=None) -> bool:
    setting = os.environ.get("FUSECC_PROGRESS", "")
    if setting in ("0", "1"):
        return setting == "1"
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def progress(items: Iterable[T], description: str, total: int | None = None, delay: float | None = None, stream=None) -> Iterator[T]:
    """`items`, with a bar once the loop has taken `delay` seconds."""
    delay = DELAY_SECONDS if delay is None else delay
    tqdm = _tqdm() if enabled(stream) else None
    if tqdm is None:
        yield from items
        return
    with tqdm(items, desc=description, total=total, delay=delay, leave=False, file=stream or sys.stderr, unit="", dynamic_ncols=True) as bar:
        yield from bar


@contextlib.contextmanager
def working(description: str, delay: float | None = None, stream=None, interval: float = 0.25):
    """An elapsed-time line for one opaque step (an LLVM or C++ compile)
    that lasts longer than `delay`, cleared when it ends."""
    delay = DELAY_SECONDS if delay is None else delay
    tqdm = _tqdm() if enabled(stream) else None
    if tqdm is None:
        yield
        return
    done = threading.Event()

    def show():
        if done.wait(delay):
            return
        with tqdm(desc=description, bar_format="{desc}: {elapsed}", leave=False, file=stream or sys.stderr) as bar:
            while not done.wait(interval):
                bar.refresh()

    thread = threading.Thread(target=show, name="fusecc-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
