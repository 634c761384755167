"""Small models written with torch.nn, the shapes of real ones: an MLP, a
BERT-style encoder layer and a LLaMA-style decoder block (hand-written, so
no fused kernel hides the ops fusecc sees)."""

from __future__ import annotations

import math

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, features=32, hidden=64, out=16):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, out)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return torch.tanh(self.fc2(h)) * 0.5


class EncoderLayer(nn.Module):
    """Post-norm BERT layer: self-attention with a padding mask, GELU MLP."""

    def __init__(self, hidden=64, heads=4, ff=128):
        super().__init__()
        self.heads, self.head = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ff1 = nn.Linear(hidden, ff)
        self.ff2 = nn.Linear(ff, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, mask):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, self.head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head)
        scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
        context = torch.softmax(scores, dim=-1) @ v
        context = context.transpose(1, 2).reshape(b, s, h)
        x = self.norm1(x + self.out(context))
        return self.norm2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class DecoderBlock(nn.Module):
    """Pre-norm LLaMA block: RMSNorm, rotary embeddings, causal attention, SwiGLU."""

    def __init__(self, hidden=64, heads=4, ff=96, max_len=64):
        super().__init__()
        self.heads, self.head = heads, hidden // heads
        self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(hidden, ff, bias=False), nn.Linear(hidden, ff, bias=False)
        self.down = nn.Linear(ff, hidden, bias=False)
        self.max_len = max_len

    def rotary(self, seq):
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, self.head, 2, dtype=torch.float32) / self.head))
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()

    def forward(self, x):
        b, s, h = x.shape
        y = self.norm1(x)
        q, k, v = (p(y).view(b, s, self.heads, self.head).transpose(1, 2) for p in (self.q, self.k, self.v))
        cos, sin = self.rotary(s)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        causal = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
        scores = q @ k.transpose(-1, -2) * (self.head ** -0.5) + causal
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, h))
        y = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(y)) * self.up(y))


class Embeddings(nn.Module):
    """BERT's input: token + position embeddings, then LayerNorm."""

    def __init__(self, vocab=100, hidden=32, max_len=16):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(max_len, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        return self.norm(self.tokens(input_ids) + self.positions(positions))


class OpZoo(nn.Module):
    """One use of each elementwise, comparison, reduction and cast fusecc translates."""

    def forward(self, x, y):
        a = torch.sqrt(x.abs() + 1.0) - torch.exp(-x) + torch.log(y.abs() + 2.0)
        b = nn.functional.gelu(y, approximate="tanh") + torch.erf(x) + torch.sigmoid(y) / (1.0 + x * x)
        c = torch.where(x > y, a, b).clamp(-3.0, 3.0)
        c = c.masked_fill(x.eq(0.0) | (y < -2.0), 0.5)
        stats = c.amax(-1, keepdim=True) + c.sum(-1, keepdim=True) * 0.1 - c.amin(0)
        flags = (x >= 0.0).to(torch.float32) + (y <= 0.0).float()
        picked = c.select(1, 2).unsqueeze(-1) + c[:, 1:4].mean(dim=1, keepdim=True)
        return torch.log_softmax(stats + flags + picked, dim=-1), torch.maximum(x, y) - torch.minimum(x, y).pow(3.0)


class GPT2Block(nn.Module):
    """GPT-2 as Hugging Face writes it: Conv1D projections (x @ W + b, so
    addmm with an untransposed weight), a causal mask kept as a boolean
    buffer and applied with where, the tanh GELU, pre-norm LayerNorm."""

    def __init__(self, hidden=64, heads=4, max_len=32):
        super().__init__()
        self.heads, self.head = heads, hidden // heads
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.c_attn_w, self.c_attn_b = nn.Parameter(0.1 * torch.randn(hidden, 3 * hidden)), nn.Parameter(0.1 * torch.randn(3 * hidden))
        self.c_proj = nn.Linear(hidden, hidden)
        self.c_fc, self.mlp_proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)).view(1, 1, max_len, max_len), persistent=False)

    def forward(self, x):
        b, s, h = x.shape
        qkv = torch.addmm(self.c_attn_b, x.view(-1, h), self.c_attn_w).view(b, s, 3 * h)
        q, k, v = (t.view(b, s, self.heads, self.head).permute(0, 2, 1, 3) for t in qkv.split(h, dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], self.head ** 0.5, dtype=x.dtype)
        causal = self.bias[:, :, :s, :s]
        scores = torch.where(causal, scores, torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        attn = torch.matmul(nn.functional.softmax(scores, dim=-1), v)
        x = x + self.c_proj(attn.permute(0, 2, 1, 3).contiguous().view(b, s, h))
        return x + self.mlp_proj(nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """Token and learned position embeddings, GPT-2 blocks, a final LayerNorm
    and the language-model head tied to the token embedding."""

    def __init__(self, vocab=128, hidden=64, heads=4, layers=2, max_len=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(max_len, hidden)
        self.h = nn.ModuleList(GPT2Block(hidden, heads, max_len) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


class LlamaRMSNorm(nn.Module):
    """Hugging Face's: the statistics in float32 whatever the model's dtype."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class LlamaBlock(nn.Module):
    """LLaMA as Hugging Face writes it: rotary tables from position ids,
    grouped-query attention (the key/value heads repeated: expand + reshape),
    scaled_dot_product_attention(is_causal=True), SwiGLU."""

    def __init__(self, hidden=64, heads=4, kv_heads=2, ff=96):
        super().__init__()
        self.heads, self.kv_heads, self.head = heads, kv_heads, hidden // heads
        self.input_layernorm, self.post_attention_layernorm = LlamaRMSNorm(hidden), LlamaRMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj, self.v_proj = (nn.Linear(hidden, kv_heads * self.head, bias=False) for _ in range(2))
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(hidden, ff, bias=False), nn.Linear(hidden, ff, bias=False)
        self.down_proj = nn.Linear(ff, hidden, bias=False)

    def repeat_kv(self, x):
        b, kv, s, d = x.shape
        groups = self.heads // kv
        return x[:, :, None, :, :].expand(b, kv, groups, s, d).reshape(b, kv * groups, s, d)

    def forward(self, x, cos, sin):
        b, s, h = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, s, self.heads, self.head).transpose(1, 2)
        k, v = (p(y).view(b, s, self.kv_heads, self.head).transpose(1, 2) for p in (self.k_proj, self.v_proj))
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        attn = nn.functional.scaled_dot_product_attention(q, self.repeat_kv(k), self.repeat_kv(v), is_causal=True)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, s, h))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(y)) * self.up_proj(y))


class Llama(nn.Module):
    def __init__(self, vocab=128, hidden=64, heads=4, kv_heads=2, ff=96, layers=2):
        super().__init__()
        self.head = hidden // heads
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(LlamaBlock(hidden, heads, kv_heads, ff) for _ in range(layers))
        self.norm = LlamaRMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, self.head, 2, dtype=torch.float32) / self.head)), persistent=False)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0).float()
        angles = (self.inv_freq.float()[None, :, None] @ positions[:, None, :]).transpose(1, 2)  # float32 in every dtype, as HF does
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))
