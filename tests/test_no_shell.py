"""Nothing in fusecc runs a shell (issue 17): no `shell=True`, no
`os.system`/`os.popen`, no subprocess call whose command is a string.
Every command is a list of arguments, so no file name or flag can be read
as shell syntax. The check walks the syntax tree of every module, so it
sees through aliases (`import subprocess as sp`, `from os import system`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("api", "compiler", "dialects", "passes", "runtime", "driver", "tools", "frontends", "benchmarks")

# Functions that always go through a shell.
SHELL_FUNCTIONS = {
    "os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput",
    "asyncio.create_subprocess_shell", "pty.spawn",
}
# Functions whose first argument is the command: it must not be a string.
COMMAND_FUNCTIONS = {
    "subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output", "subprocess.Popen",
    "asyncio.create_subprocess_exec", "os.execl", "os.execlp", "os.spawnl", "os.spawnlp",
}


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name, from the module's imports."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, imports: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([imports.get(node.id, node.id), *reversed(parts)])


def _is_string(node: ast.expr, strings: set[str]) -> bool:
    """A str literal, f-string, concatenation or .format()/% of strings, or a
    name bound to one of those in the same scope."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _is_string(node.left, strings) or (isinstance(node.op, ast.Add) and _is_string(node.right, strings))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "join"):
        return _is_string(node.func.value, strings)
    return isinstance(node, ast.Name) and node.id in strings


def _string_names(scope: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and _is_string(node.value, names):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def shell_uses(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: what` for each way `source` runs (or may run) a shell."""
    tree = ast.parse(source, filename)
    imports = _imported_names(tree)
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))]
    strings_in = {id(scope): _string_names(scope) for scope in scopes}
    found = []

    def visit(node: ast.AST, strings: set[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            strings = strings | strings_in[id(node)]
        if isinstance(node, ast.Call):
            name = _dotted(node.func, imports)
            where = f"{filename}:{node.lineno}"
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant) and keyword.value.value is False):
                    found.append(f"{where}: shell= in a call to {name or 'a function'}")
            if name in SHELL_FUNCTIONS:
                found.append(f"{where}: {name} runs a shell")
            if name in COMMAND_FUNCTIONS:
                command = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "args"), None)
                if command is not None and _is_string(command, strings):
                    found.append(f"{where}: {name} with a string command (give a list of arguments)")
        for child in ast.iter_child_nodes(node):
            visit(child, strings)

    visit(tree, strings_in[id(tree)])
    return found


def sources() -> list[Path]:
    return sorted(p for folder in FOLDERS if (REPO / folder).is_dir() for p in (REPO / folder).rglob("*.py"))


def test_nothing_runs_a_shell():
    files = sources()
    assert len(files) > 100  # the walk really covers the code
    problems = [use for path in files for use in shell_uses(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))]
    assert problems == []


@pytest.mark.parametrize(
    "code",
    [
        "import subprocess\nsubprocess.run(['g++', 'x.cpp'], shell=True)",
        "import subprocess as sp\nsp.Popen(['ls'], shell=flag)",
        "import os\nos.system('rm -rf x')",
        "from os import popen\npopen('ls')",
        "import subprocess\nsubprocess.check_output('nvcc ' + path)",
        "import subprocess\nsubprocess.run(f'{cxx} -O2 {name}')",
        "import subprocess\ndef f(cxx):\n    command = cxx + ' -shared'\n    subprocess.run(command, check=True)",
        "from subprocess import call\ncall(args='make')",
        "import subprocess\nsubprocess.getoutput('ls')",
    ],
)
def test_each_shell_pattern_is_caught(code):
    assert len(shell_uses(code)) == 1, code


@pytest.mark.parametrize(
    "code",
    [
        "import subprocess\nsubprocess.run(['g++', '-O2', name], check=True)",
        "import subprocess\nsubprocess.run([cxx, *flags], shell=False)",
        "import subprocess\ncommand = [cxx, '-shared']\nsubprocess.run(command)",
        "run('not subprocess')",
    ],
)
def test_argument_lists_pass(code):
    assert shell_uses(code) == []
