"""Malformed programs through the real command-line tools.

Each file in tests/corpus/malformed/ starts with `// EXPECTED: LINE:COL: message`.
Both `fusecc-opt FILE` and `fusecc run FILE` must print exactly that error as
`FILE:LINE:COL: error: message`, then the source line and a caret under the
column, exit with 1, and never show a Python traceback.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

CORPUS = pathlib.Path(__file__).resolve().parent.parent / "corpus" / "malformed"
FILES = sorted(CORPUS.glob("*.ir"))
BIN = pathlib.Path(sys.executable).parent
HEADER = re.compile(r"^// EXPECTED: (\d+):(\d+): (.*)$")

COMMANDS = {
    "fusecc-opt": lambda name: [str(BIN / "fusecc-opt"), name],
    "fusecc run": lambda name: [str(BIN / "fusecc"), "run", name, "--random-inputs", "--target", "reference"],
}


def test_the_corpus_is_large_enough():
    assert len(FILES) >= 20


@pytest.mark.parametrize("tool", COMMANDS)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_malformed_input_gives_a_located_error(path, tool):
    lines = path.read_text().split("\n")
    line, col, message = HEADER.match(lines[0]).groups()
    line, col = int(line), int(col)
    env = dict(os.environ, FUSECC_DEBUG="0")
    proc = subprocess.run(COMMANDS[tool](path.name), cwd=CORPUS, capture_output=True, text=True, env=env)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    first, source, caret, *_ = proc.stderr.split("\n")
    assert first == f"{path.name}:{line}:{col}: error: {message}"
    assert source == lines[line - 1]
    expected_caret = "".join(c if c == "\t" else " " for c in lines[line - 1][: col - 1]) + "^"
    assert caret == expected_caret
