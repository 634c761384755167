"""An on-disk cache for compiled artefacts (object files, CPU-harness
libraries, cubins), hardened because fusecc executes what it finds there.

Layout: <root>/<kind>/<key>/ holds one entry: the files its builder wrote
and DIGEST, the sha256 of their names and bytes. The key is a digest of
everything that determines the entry (source, compiler version, flags,
architecture), so a stale entry is never found, only left behind.

- The root is $FUSECC_CACHE_DIR, else $XDG_CACHE_HOME/fusecc, else
  ~/.cache/fusecc. Folders are created with mode 0700. A root (or kind
  folder) owned by another user, or writable by group or others, is refused:
  one warning, and this process builds everything in a private temporary
  folder instead (nothing is read from or written to that cache).
- An entry's DIGEST is checked before its files are used; a mismatch (a
  tampered or damaged entry) is a warning, and the entry is rebuilt. The
  digest catches corruption and changed files; the protection against
  other users is the ownership and mode check, since whoever can write the
  folder could rewrite DIGEST too.
- Entries are built in a private temporary folder beside them and appear by
  one atomic rename, so readers never see half an entry. A byte-range lock
  (one per entry) in the kind folder's single `.lock` file makes concurrent
  processes build each entry once; no lock file is left per entry.
- The cache holds at most $FUSECC_CACHE_MAX_BYTES (default 2 GiB; suffixes
  K, M, G; 0 turns the disk cache off). Each use refreshes an entry's time;
  after a store, the least recently used entries are evicted.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import logging
import mmap
import os
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

log = logging.getLogger("fusecc.cache")

KINDS = {
    "cpu": "object files of the CPU JIT",
    "cpu-harness": "shared libraries and precompiled headers of the CUDA CPU harness",
    "cubin": "CUDA binaries (NVRTC)",
    "parser": "the parser's LALR tables",
    "program": "compiled CPU programs of model files (kernels, schedule, constants)",
    "program-loops": "compiled CPU programs of model files with `?` dims, as loop-level modules (driver/program_cache.py)",
    "file-digest": "content digests of model files, by inode, size and times (driver/program_cache.py)",
}
DEFAULT_MAX_BYTES = 2 << 30
DIGEST_FILE = "DIGEST"
BLOB_FILE = "data"
LOCK_FILE = ".lock"
TEMP_PREFIX = ".tmp-"
STALE_TEMP_SECONDS = 3600
# https://bford.info/cachedir/: backup tools skip a folder holding this file.
CACHEDIR_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This file marks the fusecc kernel cache (fusecc cache info).\n"

_lock = threading.Lock()
_warned: set[str] = set()
_lock_fds: dict[Path, int] = {}
_private: dict[tuple[str, str], Path] = {}  # entries built without a disk cache, this process


@dataclass
class Counts:
    """Entries this process found in the disk cache and built (for `fusecc run`)."""

    hits: int = 0
    builds: int = 0


counts = Counts()


# --------------------------------------------------------------------------- where, and whether to trust it


def cache_root() -> Path:
    if explicit := os.environ.get("FUSECC_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fusecc"


def max_bytes() -> int:
    """The size limit: $FUSECC_CACHE_MAX_BYTES (e.g. 500M, 4G), else 2 GiB."""
    text = os.environ.get("FUSECC_CACHE_MAX_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    try:
        return max(0, int(float(text[:-1] if scale > 1 else text) * scale))
    except ValueError:
        warn_once(f"FUSECC_CACHE_MAX_BYTES={text!r} is not a size (e.g. 500M, 4G); using the default, 2G")
        return DEFAULT_MAX_BYTES


def warn_once(message: str) -> None:
    with _lock:
        if message in _warned:
            return
        _warned.add(message)
    log.warning("fusecc: warning: %s", message)


def unsafe_reason(path: Path) -> str | None:
    """Why `path` (a folder) must not be trusted, or None."""
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != os.getuid():
        return f"it is owned by user id {info.st_uid}, not by this user ({os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by {'group and others' if info.st_mode & stat.S_IWGRP and info.st_mode & stat.S_IWOTH else 'group' if info.st_mode & stat.S_IWGRP else 'others'} (mode {stat.S_IMODE(info.st_mode):o}; chmod 700 it)"
    return None


def root_problem(root: str | os.PathLike | None = None) -> str | None:
    """Why the cache at `root` would be refused, without creating it (for
    `fusecc cache info`); None when it is usable or does not exist yet."""
    path = Path(root) if root is not None else cache_root()
    if max_bytes() == 0:
        return "FUSECC_CACHE_MAX_BYTES is 0"
    try:
        return unsafe_reason(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"


def _private_dir(path: Path) -> None:
    """Create `path` (and missing parents) with mode 0700 whatever the umask."""
    if not path.exists():
        _private_dir(path.parent)
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)
        except FileExistsError:
            pass


@functools.lru_cache(maxsize=None)
def _checked(root: str) -> str | None:
    """Create and vet a root once per process; the reason it is refused, or None."""
    path = Path(root)
    try:
        _private_dir(path)
        reason = unsafe_reason(path)
        if reason is None and not (path / "CACHEDIR.TAG").exists():
            atomic_write(path / "CACHEDIR.TAG", CACHEDIR_TAG.encode())
    except OSError as exc:
        reason = f"it cannot be created or written ({exc.strerror or exc})"
    if reason is not None:
        warn_once(f"not using the kernel cache '{root}': {reason}; compiling without a disk cache")
    return reason


def kind_dir(kind: str, root: str | os.PathLike | None = None) -> Path | None:
    """The folder of one kind of entry, created and vetted; None when the
    cache must not be used (the reason was printed once)."""
    if kind not in KINDS:
        raise ValueError(f"unknown cache kind {kind!r}")
    if max_bytes() == 0:
        return None
    base = Path(root) if root is not None else cache_root()
    if _checked(str(base)) is not None:
        return None
    path = base / kind
    try:
        _private_dir(path)
        reason = unsafe_reason(path)
    except OSError as exc:
        reason = f"it cannot be created ({exc.strerror or exc})"
    if reason is not None:
        warn_once(f"not using the kernel cache folder '{path}': {reason}; compiling without a disk cache")
        return None
    return path


def cache_dir(kind: str, root: str | os.PathLike | None = None) -> Path:
    """The vetted folder of `kind` for a caller that manages its own files
    (the parser's lark tables); OSError when the cache must not be used."""
    path = kind_dir(kind, root)
    if path is None:
        raise OSError(f"the kernel cache is not used (see the warning above)")
    return path


# --------------------------------------------------------------------------- entries


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:32]


def _hash_file(h, name: str, size: int, blocks) -> None:
    h.update(len(name.encode()).to_bytes(8, "little") + name.encode() + size.to_bytes(8, "little"))
    for block in blocks:
        h.update(block)


def content_digest(entry: Path) -> str:
    """sha256 of an entry's file names and bytes (DIGEST itself excluded)."""
    h = hashlib.sha256()
    for path in sorted(p for p in entry.rglob("*") if p.is_file() and p.name != DIGEST_FILE):
        with open(path, "rb") as f:
            _hash_file(h, path.relative_to(entry).as_posix(), os.fstat(f.fileno()).st_size, iter(lambda: f.read(1 << 20), b""))
    return h.hexdigest()


def blob_digest(data: bytes | list) -> str:
    """content_digest of an entry holding only `data` (fetch_bytes): bytes,
    or a list of chunks that make them."""
    chunks = data if isinstance(data, list) else [data]
    h = hashlib.sha256()
    _hash_file(h, BLOB_FILE, sum(memoryview(c).nbytes for c in chunks), chunks)
    return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _remove(Path(tmp))
        raise


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def _read_blob(path: Path, aligned: bool):
    """A blob's bytes; `aligned`: mapped copy-on-write (a private, page
    aligned, writable memoryview; pages are read as they are touched, never
    copied whole), so that the caller can use parts of it in place where
    alignment matters (runtime/cpu/image.py's constants). Entries are never
    written in place (each appears by one rename, and goes by an unlink), so
    the mapped bytes stay those the digest was checked on."""
    if not aligned:
        return path.read_bytes()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE))


def _verified(entry: Path, blob: bool, aligned: bool = False):
    """The entry (its folder, or for a blob its bytes) if it matches its
    DIGEST, else None; a mismatching entry is removed with a warning. A blob
    is checked in memory, so what is returned is exactly what was checked."""
    try:
        recorded = (entry / DIGEST_FILE).read_text().strip()
        if blob:
            value = _read_blob(entry / BLOB_FILE, aligned)
            actual = blob_digest(value)
        else:
            value, actual = entry, content_digest(entry)
    except FileNotFoundError:
        if os.path.lexists(entry):  # a leftover of the layout before digests: replace it quietly
            _remove(entry)
        return None
    except OSError:
        recorded, actual = "(unreadable)", "?"
    if recorded == actual:
        try:
            os.utime(entry)  # the LRU clock
        except OSError:
            pass
        return value
    if os.path.lexists(entry):
        warn_once(f"the kernel cache entry '{entry}' does not match its digest (tampered with or damaged); rebuilding it")
        _remove(entry)
    return None


class _EntryLock:
    """An exclusive byte-range lock on the kind folder's one `.lock` file.
    POSIX record locks belong to the process and all of them go when any
    descriptor of the file is closed, so each file is opened once."""

    def __init__(self, folder: Path, key: str):
        path = folder / LOCK_FILE
        with _lock:
            fd = _lock_fds.get(path)
            if fd is None:
                fd = _lock_fds[path] = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.fd, self.offset = fd, int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)

    def __enter__(self):
        fcntl.lockf(self.fd, fcntl.LOCK_EX, 1, self.offset)

    def __exit__(self, *exc):
        fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, self.offset)


def fetch(kind: str, key: str, build: Callable[[Path], None], root: str | os.PathLike | None = None) -> tuple[Path, bool]:
    """The folder of entry `key`, and whether it came from the disk cache.
    On a miss, `build(folder)` writes the entry's files into an empty
    private folder. Without a usable disk cache the entry is built into a
    private temporary folder (kept for this process, removed at exit)."""
    return _fetch(kind, key, build, root, blob=False)


def fetch_bytes(kind: str, key: str, build: Callable[[], bytes | list], root: str | os.PathLike | None = None, aligned: bool = False) -> tuple[bytes, bool]:
    """Like fetch, for an entry that is one blob of bytes. `build` may give
    a list of byte chunks, written one after the other (then a miss returns
    that list). `aligned`: a blob found in the cache comes in a page-aligned
    writable buffer (a memoryview)."""
    built: list = []

    def write(folder: Path) -> None:
        data = build()
        with open(folder / BLOB_FILE, "wb") as f:
            for chunk in data if isinstance(data, list) else [data]:
                f.write(chunk)
        built.append(data)

    return _fetch(kind, key, write, root, blob=True, aligned=aligned, built=built)


def lookup(kind: str, key: str, root: str | os.PathLike | None = None) -> Path | None:
    """A folder entry's path if the disk cache holds it (checked against its
    digest, as fetch does), else None; nothing is built."""
    folder = kind_dir(kind, root)
    if folder is None:
        return None
    found = _verified(folder / key, False)
    if found is not None:
        counts.hits += 1
    return found


def lookup_bytes(kind: str, key: str, root: str | os.PathLike | None = None, aligned: bool = False):
    """A blob entry's bytes if the disk cache holds it (checked against its
    digest, as fetch_bytes does), else None; nothing is built."""
    folder = kind_dir(kind, root)
    if folder is None:
        return None
    found = _verified(folder / key, True, aligned)
    if found is not None:
        counts.hits += 1
    return found


def _fetch(kind: str, key: str, build: Callable[[Path], None], root, blob: bool, aligned: bool = False, built: list | None = None):
    folder = kind_dir(kind, root)
    if folder is None:
        counts.builds += 1
        private = _fetch_private(kind, key, build)
        return (_read_blob(private / BLOB_FILE, aligned) if blob else private), False
    entry = folder / key
    if (found := _verified(entry, blob, aligned)) is not None:
        counts.hits += 1
        return found, True
    with _EntryLock(folder, key):
        if (found := _verified(entry, blob, aligned)) is not None:  # another process built it meanwhile
            counts.hits += 1
            return found, True
        building = Path(tempfile.mkdtemp(dir=folder, prefix=TEMP_PREFIX))
        try:
            build(building)
            # A blob just built is hashed from memory, not read back.
            value = built[0] if blob and built and set(os.listdir(building)) == {BLOB_FILE} else None
            atomic_write(building / DIGEST_FILE, (blob_digest(value) if value is not None else content_digest(building)).encode())
            if blob and value is None:
                value = _read_blob(building / BLOB_FILE, aligned)
            try:
                os.rename(building, entry)
            except OSError:  # a thread of this process stored it first (locks are per process)
                _remove(building)
                if (found := _verified(entry, blob, aligned)) is None:
                    raise
                return found, True
        except BaseException:
            _remove(building)
            raise
    counts.builds += 1
    evict(keep=entry, root=root)
    return (value if blob else entry), False


def _fetch_private(kind: str, key: str, build: Callable[[Path], None]) -> Path:
    with _lock:
        found = _private.get((kind, key))
    if found is not None:
        return found
    folder = Path(tempfile.mkdtemp(prefix=f"fusecc-{kind}-"))
    atexit.register(shutil.rmtree, folder, True)
    build(folder)
    with _lock:
        return _private.setdefault((kind, key), folder)


# --------------------------------------------------------------------------- size, eviction, inspection


@dataclass(frozen=True)
class EntryInfo:
    path: Path
    kind: str
    size: int
    last_used: float


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def entries(root: str | os.PathLike | None = None) -> list[EntryInfo]:
    """Every entry under the root, oldest use first (entries of older
    layouts, loose files, count too, so that they age out)."""
    base = Path(root) if root is not None else cache_root()
    found = []
    for kind in KINDS:
        try:
            children = list((base / kind).iterdir())
        except OSError:
            continue
        for path in children:
            if path.name == LOCK_FILE:
                continue
            try:
                info = path.lstat()
                if path.name.startswith(TEMP_PREFIX):
                    if time.time() - info.st_mtime > STALE_TEMP_SECONDS:  # left by a killed process
                        _remove(path)
                    continue
                found.append(EntryInfo(path, kind, _size(path), info.st_mtime))
            except OSError:  # removed by another process meanwhile
                continue
    return sorted(found, key=lambda e: e.last_used)


def evict(keep: Path | None = None, root: str | os.PathLike | None = None, limit: int | None = None) -> list[EntryInfo]:
    """Remove least recently used entries until the cache fits the limit."""
    limit = max_bytes() if limit is None else limit
    found = entries(root)
    total = sum(e.size for e in found)
    removed = []
    for entry in found:
        if total <= limit:
            break
        if entry.path == keep:
            continue
        _remove(entry.path)
        total -= entry.size
        removed.append(entry)
    return removed


def clear(root: str | os.PathLike | None = None) -> int:
    """Remove every entry (only inside the known kind folders: a root set to
    a shared folder by mistake loses nothing else). Returns bytes freed."""
    found = entries(root)
    for entry in found:
        _remove(entry.path)
    return sum(e.size for e in found)
