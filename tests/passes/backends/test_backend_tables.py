"""Every backend table renders every legal op (passes/backends/table.py):
adding an elementwise op to the legal set without a line per backend fails
here."""

from __future__ import annotations

from fusecc.passes.backends.llvm.op_table import TABLE as LLVM_TABLE
from fusecc.passes.backends.table import LEGAL_KEYS, missing_entries


def test_the_llvm_table_covers_every_legal_op():
    assert missing_entries(LLVM_TABLE) == []


def test_the_llvm_table_has_no_key_outside_the_legal_set():
    assert set(LLVM_TABLE) <= LEGAL_KEYS
