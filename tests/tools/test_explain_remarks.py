"""Issue 14.8: explain's remarks read correctly. A layernorm alone in its
group says why it was not fused with its producer and with the matmul it
feeds (not 'no fusible producer or consumer'), and a remark never names an op
as 'the tensor.matmul at line N' on line N itself."""

from __future__ import annotations

import pathlib
import re

from fusecc.tools import fusecc as driver

ROOT = pathlib.Path(__file__).resolve().parents[2]


def remarks(example: str, capsys) -> list[tuple[int, str]]:
    assert driver.main(["explain", str(ROOT / "examples" / example)]) == 0
    out = capsys.readouterr().out
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^\S+?:(\d+):\d+: remark: (.*)$", out, re.M)]


def test_a_lone_layernorm_says_why_it_was_not_fused_with_the_matmul_it_feeds(capsys):
    found = remarks("encoder_block.ir", capsys)
    lines = (ROOT / "examples" / "encoder_block.ir").read_text().split("\n")
    layernorm = next(i + 1 for i, line in enumerate(lines) if line.strip().startswith("%h = tensor.layernorm"))
    (alone,) = [text for line, text in found if line == layernorm and text.startswith("alone in")]
    assert "no fusible producer or consumer" not in alone
    assert "%ffn_up (which is already in a matmul group)" in alone and "%residual1 (tensor.layernorm is not an elementwise epilogue)" in alone


def test_no_remark_names_an_op_by_its_own_line(capsys):
    for example in ("llama_block.ir", "encoder_block.ir", "attention.ir", "mlp.ir"):
        for line, text in remarks(example, capsys):
            for named in re.findall(r"at line (\d+)", text):
                assert int(named) != line, f"{example}:{line}: {text}"


def test_ops_a_rewrite_made_are_called_so(capsys):
    texts = [text for _, text in remarks("llama_block.ir", capsys)]
    assert any(text.startswith("the tensor.slice a rewrite made here is not fused with the tensor.matmul a rewrite made here") for text in texts)
