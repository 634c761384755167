"""`fusecc cache info|clear`: what the kernel cache holds, and emptying it.

    fusecc cache info [--json]   where the cache is, whether it is used, entries and bytes per kind, the limit
    fusecc cache clear           remove every entry (only inside the cache's own kind folders)
"""

from __future__ import annotations

import argparse
import json
import os

from fusecc.compiler.diagnostics import DiagnosticEngine, UsageError
from fusecc.runtime import cache

from fusecc.tools.common import ArgumentParser, write_output


def human(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError


def entries_text(count: int) -> str:
    return f"{count} {'entry' if count == 1 else 'entries'}"


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="fusecc cache",
        description="Inspect or empty the kernel cache ($FUSECC_CACHE_DIR, else $XDG_CACHE_HOME/fusecc, else ~/.cache/fusecc).",
    )
    commands = p.add_subparsers(dest="command", required=True, metavar="{info,clear}", parser_class=ArgumentParser)
    info = commands.add_parser("info", help="where the cache is, whether it is used, entries and bytes per kind")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    commands.add_parser("clear", help="remove every entry")
    return p


def info(as_json: bool) -> str:
    root = cache.cache_root()
    problem = cache.root_problem(root)
    found = cache.entries(root)
    limit = cache.max_bytes()
    kinds = {kind: {"entries": 0, "bytes": 0, "holds": what} for kind, what in cache.KINDS.items()}
    for entry in found:
        kinds[entry.kind]["entries"] += 1
        kinds[entry.kind]["bytes"] += entry.size
    total = sum(e.size for e in found)
    if as_json:
        data = {"root": str(root), "used": problem is None, "problem": problem, "limit_bytes": limit, "bytes": total, "entries": len(found), "kinds": kinds}
        return json.dumps(data, indent=2) + "\n"
    state = "in use" if problem is None and root.exists() else "not created yet" if problem is None else f"NOT USED: {problem}"
    limit_from = "FUSECC_CACHE_MAX_BYTES" if os.environ.get("FUSECC_CACHE_MAX_BYTES", "").strip() else "default; set FUSECC_CACHE_MAX_BYTES to change"
    lines = [
        f"cache: {root} ({state})",
        f"limit: {human(limit)} ({limit_from}); least recently used entries are evicted past it",
    ]
    for kind, row in kinds.items():
        lines.append(f"  {kind:<12} {entries_text(row['entries']):>12} {human(row['bytes']):>11}  {row['holds']}")
    lines.append(f"  {'total':<12} {entries_text(len(found)):>12} {human(total):>11}")
    return "\n".join(lines) + "\n"


def cache_main(argv: list[str], engine: DiagnosticEngine) -> int:
    args = parser().parse_args(argv)
    if args.command == "info":
        write_output(None, info(args.json))
        return 0
    root = cache.cache_root()
    count = len(cache.entries(root))
    try:
        freed = cache.clear(root)
    except OSError as exc:
        raise UsageError(f"could not clear the cache '{root}': {exc.strerror or exc}") from None
    write_output(None, f"removed {entries_text(count)} ({human(freed)}) from {root}\n")
    return 0
