"""The largest modules and classes of the package, by lines, at a git revision.

    python benchmarks/module_sizes.py                 # the working tree
    python benchmarks/module_sizes.py --rev 84b7ea5   # before issue 9's layout
    python benchmarks/module_sizes.py --rev 84b7ea5 --rev HEAD --top 15

The style rule is ~500 lines per module and ~300 per class. Counts are
physical lines of the .py files of the package folders (tests, benchmarks
and examples excluded); a class spans from its `class` line to its last line.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXCLUDED = ("tests/", "benchmarks/", "examples/", "docs/", "build/", ".venv/")


def sources(rev: str | None) -> dict[str, str]:
    """path -> text of every package .py file at `rev` (None: the working tree)."""
    if rev is None:
        paths = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
        return {p: (ROOT / p).read_text() for p in paths if not p.startswith(EXCLUDED) and (ROOT / p).exists()}
    paths = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return {p: subprocess.run(["git", "show", f"{rev}:{p}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout for p in paths if p.endswith(".py") and not p.startswith(EXCLUDED)}


def sizes(files: dict[str, str]) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    modules, classes = [], []
    for path, text in files.items():
        modules.append((len(text.splitlines()), path))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                classes.append((node.end_lineno - node.lineno + 1, f"{path}:{node.name}"))
    return sorted(modules, reverse=True), sorted(classes, reverse=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", action="append", help="git revision (repeatable; default: the working tree)")
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    for rev in args.rev or [None]:
        files = sources(rev)
        modules, classes = sizes(files)
        total = sum(n for n, _ in modules)
        print(f"== {rev or 'working tree'}: {len(files)} modules, {total} lines; "
              f"{sum(n > 500 for n, _ in modules)} modules > 500 lines, {sum(n > 300 for n, _ in classes)} classes > 300 lines")
        print("  modules:")
        for n, name in modules[: args.top]:
            print(f"    {n:5d}  {name}")
        print("  classes:")
        for n, name in classes[: args.top]:
            print(f"    {n:5d}  {name}")


if __name__ == "__main__":
    main()
