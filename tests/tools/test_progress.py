"""Issue 14.8: progress for work over about a second, on a terminal only.
compiler/progress.py draws with tqdm after a delay, to standard error, only
when it is a terminal (FUSECC_PROGRESS forces it on or off); the cold CPU
compile, the CUDA harness compile and the ONNX import use it."""

from __future__ import annotations

import io
import time

import pytest

from fusecc.compiler import progress as P


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_bar_appears_on_a_terminal_once_the_work_outlasts_the_delay(monkeypatch):
    monkeypatch.delenv("FUSECC_PROGRESS", raising=False)
    terminal = Terminal()
    assert list(P.progress(iter(range(3)), "importing", total=3, delay=0.0, stream=terminal)) == [0, 1, 2]
    assert "importing" in terminal.getvalue() and "/3 [" in terminal.getvalue()
    quick = Terminal()
    assert list(P.progress(range(3), "importing", delay=60, stream=quick)) == [0, 1, 2]
    assert quick.getvalue() == ""  # under the delay: nothing drawn


def test_nothing_is_drawn_to_a_pipe_or_a_file(monkeypatch):
    monkeypatch.delenv("FUSECC_PROGRESS", raising=False)
    pipe = io.StringIO()
    assert list(P.progress(range(3), "importing", delay=0.0, stream=pipe)) == [0, 1, 2]
    with P.working("compiling", delay=0.0, stream=pipe):
        time.sleep(0.05)
    assert pipe.getvalue() == ""
    monkeypatch.setenv("FUSECC_PROGRESS", "0")
    terminal = Terminal()
    assert list(P.progress(range(3), "importing", delay=0.0, stream=terminal)) == [0, 1, 2]
    assert terminal.getvalue() == ""


def test_working_shows_the_elapsed_time_of_a_long_step(monkeypatch):
    monkeypatch.delenv("FUSECC_PROGRESS", raising=False)
    terminal = Terminal()
    with P.working("compiling 3 CPU kernels with LLVM", delay=0.0, stream=terminal, interval=0.01):
        time.sleep(0.1)
    assert "compiling 3 CPU kernels with LLVM: 00:00" in terminal.getvalue()


def test_a_cold_cpu_compile_reports_progress(monkeypatch, tmp_path, capsys):
    from fusecc.runtime.cpu import jit

    monkeypatch.setenv("FUSECC_PROGRESS", "1")
    monkeypatch.setenv("FUSECC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(P, "DELAY_SECONDS", 0.0)
    text = 'define void @progress_probe() {\n  ret void\n}\n'
    jit.compile_ir(text + f"; {time.time()}\n", ["progress_probe"])
    assert "compiling 1 CPU kernels with LLVM" in capsys.readouterr().err


def test_an_onnx_import_reports_progress(monkeypatch, tmp_path, capsys):
    onnx = pytest.importorskip("onnx", reason="the onnx extra")
    from onnx import TensorProto, helper

    from fusecc.frontends.onnx import import_onnx

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu"), helper.make_node("Neg", ["y"], ["z"], name="neg")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    monkeypatch.setenv("FUSECC_PROGRESS", "1")
    monkeypatch.setattr(P, "DELAY_SECONDS", 0.0)
    import_onnx(str(path), {})
    assert "importing 2 ONNX nodes" in capsys.readouterr().err
