"""A Llama-style decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention) for the benchmarks.

One model for every system compared (FSDP2 with and without CPU offload, TRANSIT, DeepSpeed), so
that per-GPU TFLOPS are computed from the same FLOP count. Configurations are picked by name.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from transit.plan.models import ModelSpec


@dataclass(frozen=True)
class ModelConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    seq_len: int
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


# Sizes: see bench/README.md ("Sizing") for the memory arithmetic behind "bench".
CONFIGS: dict[str, ModelConfig] = {
    # CPU tests: a few seconds per step with gloo.
    "tiny": ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=192, vocab_size=256, seq_len=32),
    # 56M parameters, about 1 GiB a rank on 2 ranks: the GPU tier's multi-rank checks, where up to 16
    # ranks share one GPU in limit mode, spilling a third of their data (tests/gpu/test_emulated_nodes.py).
    "mini": ModelConfig(dim=512, n_layers=6, n_heads=8, n_kv_heads=4, ffn_dim=2048, vocab_size=32000, seq_len=1024),
    # Fits one H200 many times over: the overhead benchmark and the GPU smoke test.
    "small": ModelConfig(dim=1024, n_layers=12, n_heads=16, n_kv_heads=8, ffn_dim=4096, vocab_size=32000,
                         seq_len=2048),
    # ~1.9B parameters: ~34 GiB on one GPU (1.4x L = 24 GiB), ~20 GiB per GPU on two.
    "bench": ModelConfig(dim=2048, n_layers=28, n_heads=16, n_kv_heads=8, ffn_dim=8192, vocab_size=32000,
                         seq_len=2048),
}


def config_by_name(name: str) -> ModelConfig:
    if name not in CONFIGS:
        raise ValueError(f"unknown model config {name!r}; known: {', '.join(CONFIGS)}")
    return CONFIGS[name]


def spec(cfg: ModelConfig) -> ModelSpec:
    """The planner's description of this model (transit.plan.models): its parameter and FLOP counts."""
    return ModelSpec("bench", layers=cfg.n_layers, hidden=cfg.dim, ffn=cfg.ffn_dim, heads=cfg.n_heads,
                     kv_heads=cfg.n_kv_heads, vocab=cfg.vocab_size)


def count_params(cfg: ModelConfig) -> dict[str, int]:
    """Parameter counts by transit.plan.models' formula (checked against the module in tests)."""
    model = spec(cfg)
    return {"total": model.total_params(), "embedding": model.embedding_params, "per_layer": model.layer_params()}


def flops_per_token(cfg: ModelConfig) -> int:
    """Model FLOPs of one token, forward and backward, without recomputation: transit.plan.models'
    count, the one `transit plan` uses (TorchTitan's and PaLM's formula)."""
    return spec(cfg).model_flops_per_token(cfg.seq_len)


def flops_per_step(cfg: ModelConfig, global_batch: int) -> int:
    """Model FLOPs of one optimizer step over `global_batch` sequences."""
    return flops_per_token(cfg) * global_batch * cfg.seq_len


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 for stability, return in the input's dtype.
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(cfg: ModelConfig, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim))
    angles = torch.outer(torch.arange(cfg.seq_len, device=device).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (batch, heads, seq, head_dim); rotate pairs (even, odd).
    seq = x.shape[-2]
    cos, sin = cos[:seq].to(x.dtype), sin[:seq].to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        # -1 heads: under tensor parallelism a rank holds n_heads / tp of them.
        q = self.wq(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Repeat the key/value heads (as TorchTitan does) so that SDPA can take its flash kernel.
        repeats = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        # Not parameters: FSDP leaves buffers alone, and they are not checkpointed state.
        self.register_buffer("rope_cos", torch.empty(cfg.seq_len, cfg.head_dim // 2), persistent=False)
        self.register_buffer("rope_sin", torch.empty(cfg.seq_len, cfg.head_dim // 2), persistent=False)
        self.init_weights()

    def init_weights(self) -> None:
        """Initialise parameters and RoPE tables in place (also after `to_empty` from meta)."""
        cos, sin = rope_tables(self.cfg, self.rope_cos.device)
        with torch.no_grad():
            self.rope_cos.copy_(cos)
            self.rope_sin.copy_(sin)
        std = 0.02
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        # Scale residual projections by depth (GPT-2 style) so the loss starts near ln(vocab).
        for block in self.layers:
            for proj in (block.attention.wo, block.feed_forward.w2):
                nn.init.normal_(proj.weight, mean=0.0, std=std / math.sqrt(2 * self.cfg.n_layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.rope_cos, self.rope_sin)
        return self.output(self.norm(x))


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


def apply_activation_checkpointing(model: Transformer) -> None:
    """Recompute each block in backward (TorchTitan's 'full' mode): wrap before sharding."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for i, block in enumerate(model.layers):
        model.layers[i] = checkpoint_wrapper(block, preserve_rng_state=False)


def synthetic_batch(cfg: ModelConfig, seed: int, step: int, global_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole global batch of `step`, identical on every rank and for every batch split.

    Tokens follow a fixed random bigram table, so there is something to learn and the loss
    falls; inputs and targets are the sequence shifted by one.
    """
    gen = torch.Generator().manual_seed(seed)
    table = torch.randint(0, cfg.vocab_size, (cfg.vocab_size,), generator=gen)
    gen.manual_seed(seed * 1_000_003 + step)
    start = torch.randint(0, cfg.vocab_size, (global_batch, 1), generator=gen)
    noise = torch.rand(global_batch, cfg.seq_len, generator=gen) < 0.1
    random_tokens = torch.randint(0, cfg.vocab_size, (global_batch, cfg.seq_len), generator=gen)
    seqs = torch.empty(global_batch, cfg.seq_len + 1, dtype=torch.long)
    seqs[:, :1] = start
    for t in range(cfg.seq_len):
        follow = table[seqs[:, t]]
        seqs[:, t + 1] = torch.where(noise[:, t], random_tokens[:, t], follow)
    return seqs[:, :-1], seqs[:, 1:]
