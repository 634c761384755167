"""torch.compile(model, backend="fusecc"): models written with torch.nn
match eager within docs/torch.md's tolerance; unsupported ops and symbolic
shapes run in eager with their reason; tensors cross without copies."""

from __future__ import annotations

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch: pip install 'fusecc[torch]'")

import fusecc.torch  # noqa: E402
from torch_models import MLP, DecoderBlock, Embeddings, EncoderLayer, OpZoo  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("fresh_dynamo")]  # fresh_dynamo: conftest.py

# docs/torch.md "Tolerance": f32 results within these of eager.
RTOL, ATOL = 1e-4, 1e-5


def assert_compiled_whole(graphs: int):
    assert fusecc.torch.stats() | {"kernels": 0, "frozen": 0} == {"whole": graphs, "split": 0, "islands": 0, "eager": 0, "kernels": 0, "frozen": 0, "refrozen": 0}
    assert fusecc.torch.stats()["kernels"] > 0


def compiled_matches_eager(model, *inputs):
    model.eval()
    with torch.no_grad():
        expected = model(*inputs)
        got = torch.compile(model, backend="fusecc")(*inputs)
    torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
    return got


def test_the_backend_is_registered_by_its_entry_point():
    assert "fusecc" in torch._dynamo.list_backends()


def test_mlp():
    compiled_matches_eager(MLP(), torch.randn(4, 32))
    assert_compiled_whole(1)


def test_bert_style_encoder_layer_with_padding():
    mask = torch.ones(2, 8)
    mask[1, 5:] = 0.0
    compiled_matches_eager(EncoderLayer(), torch.randn(2, 8, 64), mask)
    assert_compiled_whole(1)


def test_llama_style_decoder_block():
    compiled_matches_eager(DecoderBlock(), torch.randn(2, 8, 64))
    assert_compiled_whole(1)


class SdpaAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x):
        q, k, v = self.qkv(x).view(1, 8, 3, 2, 16).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_scaled_dot_product_attention():
    compiled_matches_eager(SdpaAttention(), torch.randn(1, 8, 32))
    assert_compiled_whole(1)


class WithCumsum(torch.nn.Module):
    def forward(self, x):
        h = torch.tanh(x * 2.0 + 1.0)
        y = torch.cumsum(h, dim=-1)  # the unsupported op's line
        return torch.sigmoid(y) * 3.0 - 1.0


def test_an_unsupported_op_stays_in_eager_the_islands_around_it_compile_and_it_is_said_once(caplog):
    x = torch.randn(3, 5)
    with caplog.at_level(logging.WARNING, logger="fusecc.torch"):
        compiled_matches_eager(WithCumsum(), x)
        torch._dynamo.reset()
        compiled_matches_eager(WithCumsum(), x)
    assert fusecc.torch.stats() | {"kernels": 0} == {"whole": 0, "split": 2, "islands": 4, "eager": 0, "kernels": 0, "frozen": 0, "refrozen": 0}
    report = fusecc.torch.explain()
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "the unsupported op's line" in text)
    assert f"aten.cumsum.default: no translation to the tensor dialect (2 graphs; first at {__file__}:{line}:" in report
    logged = [r.getMessage() for r in caplog.records if "aten.cumsum" in r.getMessage()]
    assert len(logged) == 1 and f"{__file__}:{line}" in logged[0]


class LoneSupportedOps(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(torch.cumsum(x, 0) * 2.0, 1)


def test_a_lone_supported_op_between_unsupported_ones_stays_in_eager():
    compiled_matches_eager(LoneSupportedOps(), torch.randn(3, 4))
    assert fusecc.torch.stats() | {"kernels": 0} == {"whole": 0, "split": 0, "islands": 0, "eager": 1, "kernels": 0, "frozen": 0, "refrozen": 0}


class WithGraphBreak(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        h = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return torch.sigmoid(self.b(h))


def test_a_graph_break_gives_two_graphs_each_compiled():
    compiled_matches_eager(WithGraphBreak(), torch.randn(4, 16))
    assert_compiled_whole(2)


def test_symbolic_shapes_become_dynamic_dims_one_compilation_for_every_batch():
    """dynamic=True: Dynamo's symbolic sizes (s0) are the IR's `?` dims named
    in fusecc.dims; one program runs at every batch size."""
    model = MLP().eval()
    with torch.no_grad():
        compiled = torch.compile(model, backend="fusecc", dynamic=True)
        for batch in (3, 5, 8):
            x = torch.randn(batch, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=RTOL, atol=ATOL)
    assert_compiled_whole(1)


class CausalSelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 16).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, 32)


def test_a_second_sequence_length_recompiles_once_with_dynamic_dims():
    """Dynamo's automatic dynamic shapes: the first call is static, a new
    length makes a graph with symbolic sizes, compiled once for all lengths."""
    model = CausalSelfAttention().eval()
    with torch.no_grad():
        compiled = torch.compile(model, backend="fusecc")
        for seq in (4, 7, 12, 5):
            x = torch.randn(2, seq, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=RTOL, atol=ATOL)
    assert_compiled_whole(2)


def test_bert_style_attention_with_dynamic_dims_compiles_whole():
    """dynamic=True on a BERT layer whose attention is written out: `q @ kᵀ`
    has a `?` N (the keys' S) and `p @ v` a `?` K; the CPU matmul template
    takes both (docs/dynamic-shapes.md), one graph for every batch and length."""
    model = EncoderLayer().eval()
    with torch.no_grad():
        compiled = torch.compile(model, backend="fusecc", dynamic=True)
        for batch, seq in ((2, 3), (2, 6), (3, 13)):  # (Dynamo specialises sizes 0 and 1: a second graph)
            x, mask = torch.randn(batch, seq, 64), torch.ones(batch, seq)
            mask[0, seq // 2 + 1 :] = 0.0  # a padded row
            torch.testing.assert_close(compiled(x, mask), model(x, mask), rtol=RTOL, atol=ATOL)
    assert_compiled_whole(1)


def test_inputs_cross_without_copies():
    x = torch.randn(4, 8)
    assert fusecc.torch.to_array(x).ctypes.data == x.data_ptr()
    transposed = x.t()  # not contiguous: copied once, the values kept
    array = fusecc.torch.to_array(transposed)
    assert array.ctypes.data != x.data_ptr() and np.array_equal(array, transposed.numpy())


def test_embeddings_gather_rows_of_integer_ids():
    ids = torch.randint(0, 100, (2, 16))
    compiled_matches_eager(Embeddings(), ids)
    assert_compiled_whole(1)


def test_elementwise_comparison_reduction_and_cast_ops():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    x[0, 0] = 0.0
    compiled_matches_eager(OpZoo(), x, y)
    assert_compiled_whole(1)


def test_with_gradients_enabled_a_graph_needing_saved_statistics_runs_in_eager():
    """Inference only: under autograd, the forward graph returns layer norm's
    mean/rstd for the backward, which fusecc does not compute."""
    model = EncoderLayer().eval()
    x, mask = torch.randn(2, 8, 64), torch.ones(2, 8)
    out = torch.compile(model, backend="fusecc")(x, mask)
    torch.testing.assert_close(out, model(x, mask), rtol=RTOL, atol=ATOL)
    out.sum().backward()
    assert model.ff1.weight.grad is not None
    report = fusecc.torch.explain()
    assert fusecc.torch.stats()["whole"] == 0
    assert "aten.native_layer_norm.default output 1: used for gradients" in report and "torch.no_grad()" in report


def test_an_mlp_with_gradients_enabled_compiles_its_forward_and_backpropagates():
    model, x = MLP(), torch.randn(4, 32)
    out = torch.compile(model, backend="fusecc")(x)
    torch.testing.assert_close(out, model(x), rtol=RTOL, atol=ATOL)
    out.sum().backward()  # the backward graph runs in eager
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for got, want in zip(expected, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    assert_compiled_whole(1)


def test_freeze_compiles_the_weights_in_and_a_changed_weight_compiles_again(caplog):
    """options={"freeze": True}: parameters become constants of the program;
    a weight changed in place (its version counter) or replaced (its storage)
    is seen: the graph is compiled again with the new values, said once."""
    model, x = MLP().eval(), torch.randn(4, 32)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="fusecc.torch"):
        frozen = torch.compile(model, backend="fusecc", options={"freeze": True})
        torch.testing.assert_close(frozen(x), model(x), rtol=RTOL, atol=ATOL)
        assert fusecc.torch.stats()["frozen"] == 4 and "4 weights frozen" in fusecc.torch.explain()
        torch.testing.assert_close(frozen(x), model(x), rtol=RTOL, atol=ATOL)
        assert fusecc.torch.stats()["refrozen"] == 0
        model.fc2.bias.add_(1.0)
        torch.testing.assert_close(frozen(x), model(x), rtol=RTOL, atol=ATOL)
        assert fusecc.torch.stats()["refrozen"] == 1
        model.fc1.weight = torch.nn.Parameter(torch.randn(64, 32))
        torch.testing.assert_close(frozen(x), model(x), rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(frozen(x), model(x), rtol=RTOL, atol=ATOL)
    assert fusecc.torch.stats()["refrozen"] == 2 and "2 recompiled after a frozen weight changed" in fusecc.torch.explain()
    assert len([r for r in caplog.records if "frozen weights changed" in r.getMessage()]) == 1


def test_weights_are_frozen_by_default_only_with_autograd_off():
    model, x = MLP().eval(), torch.randn(4, 32)
    with torch.no_grad():
        torch.compile(model, backend="fusecc")(x)
    assert fusecc.torch.stats()["frozen"] == 4
    torch._dynamo.reset()
    fusecc.torch.reset()
    torch.compile(model, backend="fusecc")(x)  # autograd on: weights stay inputs
    assert fusecc.torch.stats()["frozen"] == 0 and fusecc.torch.stats()["whole"] == 1


def test_unknown_backend_options_are_refused():
    with pytest.raises(Exception, match="unknown fusecc backend option fast"):
        torch.compile(MLP(), backend="fusecc", options={"fast": True})(torch.randn(2, 32))


def test_a_program_fusecc_cannot_compile_runs_in_eager(monkeypatch):
    import fusecc.driver.program
    from fusecc.compiler.diagnostics import UsageError

    def refuse(*args, **kwargs):
        raise UsageError("the CPU target cannot run this (a stand-in for a compiler limit)")

    monkeypatch.setattr(fusecc.driver.program, "Program", refuse)
    compiled_matches_eager(MLP(), torch.randn(4, 32))
    report = fusecc.torch.explain()
    assert fusecc.torch.stats() | {"kernels": 0} == {"whole": 0, "split": 0, "islands": 0, "eager": 1, "kernels": 0, "frozen": 0, "refrozen": 0}
    assert "fusecc.compile: the CPU target cannot run this" in report
