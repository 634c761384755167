"""fusecc.from_torch (torch.export): weights as named resources, locations in
the user's source, the same numbers as eager; `fusecc import model.pt2`."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch: pip install 'fusecc[torch]'")

import fusecc  # noqa: E402
import fusecc.torch  # noqa: E402,F401
from fusecc.compiler.parser import parse_module  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from fusecc.frontends.torch import Unsupported  # noqa: E402
from fusecc.tools.fusecc import main as fusecc_main  # noqa: E402
from torch_models import MLP, DecoderBlock  # noqa: E402

pytestmark = pytest.mark.torch
RTOL, ATOL = 1e-4, 1e-5  # docs/torch.md "Tolerance"


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def run(module, *inputs):
    program = fusecc.compile(module, target="cpu")
    return [torch.from_numpy(r) for r in program(*[x.numpy() for x in inputs]).values()]


def test_mlp_weights_become_named_resources(tmp_path):
    model, x = MLP().eval(), torch.randn(4, 32)
    module = fusecc.from_torch(model, (x,))
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(run(module, x)[0], expected, rtol=RTOL, atol=ATOL)

    weights = fusecc.save_module(module, tmp_path / "mlp.ir")
    assert weights == tmp_path / "mlp.safetensors"
    stored = load_file(weights)
    np.testing.assert_array_equal(stored["fc1.weight"], model.fc1.weight.detach().numpy())
    text = (tmp_path / "mlp.ir").read_text()
    assert "dense_resource<fc2.weight>" in text
    reread = parse_module(text, str(tmp_path / "mlp.ir"))
    torch.testing.assert_close(run(reread, x)[0], expected, rtol=RTOL, atol=ATOL)


def test_dynamic_shapes_of_an_export_are_dynamic_dims_of_the_program():
    model = MLP().eval()
    module = fusecc.from_torch(model, (torch.randn(4, 32),), dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    assert str(module.lookup("main").arguments[0].type) == "tensor<?x32xf32>"
    program = fusecc.compile(module, target="cpu")
    with torch.no_grad():
        for batch in (1, 3, 9):
            x = torch.randn(batch, 32)
            torch.testing.assert_close(torch.from_numpy(next(iter(program(x.numpy()).values()))), model(x), rtol=RTOL, atol=ATOL)


def test_decoder_block_on_the_reference_and_cpu():
    model, x = DecoderBlock().eval(), torch.randn(1, 8, 64)
    module = fusecc.from_torch(model, (x,))
    with torch.no_grad():
        expected = model(x)
    for target in ("reference", "cpu"):
        program = fusecc.compile(module, target=target)
        got = torch.from_numpy(next(iter(program(x.numpy()).values())))
        torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        y = x @ self.w
        return torch.softmax(y * 0.25, dim=-1)


def line_of(needle: str) -> int:
    lines, start = inspect.getsourcelines(Scaled)
    return start + next(i for i, text in enumerate(lines) if needle in text)


def test_ops_are_located_at_the_users_lines():
    module = fusecc.from_torch(Scaled(), (torch.randn(2, 8),))
    located = {op.name: op.location.file_line_col() for op in module.walk() if op.name.startswith("tensor.") and op.name != "tensor.constant"}
    assert located["tensor.matmul"].file == __file__ and located["tensor.matmul"].line == line_of("x @ self.w")
    assert located["tensor.softmax"].file == __file__ and located["tensor.softmax"].line == line_of("torch.softmax")


class Cumulative(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=0)


def test_unsupported_ops_are_refused_with_their_place():
    with pytest.raises(Unsupported) as info:
        fusecc.from_torch(Cumulative(), (torch.randn(3, 4),))
    assert "aten.cumsum.default: no translation to the tensor dialect" in str(info.value)
    assert str(info.value).startswith(f"{__file__}:")


def test_fusecc_import_of_a_pt2_file(tmp_path, capsys):
    model, x = MLP().eval(), torch.randn(4, 32)
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "mlp.pt2")
    assert fusecc_main(["import", str(tmp_path / "mlp.pt2"), "-o", str(tmp_path / "mlp.ir")]) == 0
    assert (tmp_path / "mlp.safetensors").exists()
    program = fusecc.compile(str(tmp_path / "mlp.ir"), target="cpu")
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(program(x=x.numpy())["mul"]), model(x), rtol=RTOL, atol=ATOL)
    capsys.readouterr()
    assert fusecc_main(["explain", str(tmp_path / "mlp.ir")]) == 0  # remarks point at the model's Python
    models_file = inspect.getsourcefile(MLP)
    assert f"{models_file}:{inspect.getsourcelines(MLP.forward)[1] + 1}:" in capsys.readouterr().out
    assert fusecc_main(["import", str(tmp_path / "mlp.pt2"), "-o", str(tmp_path / "b.ir"), "--shape", "x=2x32"]) == 1
    assert "keeps the shapes it was exported with" in capsys.readouterr().err


def test_fusecc_import_of_a_file_that_is_no_export_program(tmp_path, capsys):
    (tmp_path / "bad.pt2").write_bytes(b"not a zip archive")
    assert fusecc_main(["import", str(tmp_path / "bad.pt2"), "-o", str(tmp_path / "bad.ir")]) == 1
    err = capsys.readouterr().err
    assert "is not a torch.export program" in err and "Traceback" not in err
    assert fusecc_main(["import", str(tmp_path / "missing.pt2"), "-o", str(tmp_path / "m.ir")]) == 1
    assert "no such file" in capsys.readouterr().err
