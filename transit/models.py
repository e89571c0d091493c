"""Transformer model shapes, their parameter counts, FLOPs and activation sizes.

Shared by the planner (`transit plan`) and the GPU benchmark harness, so that the FLOPs used
for per-GPU TFLOPS and the bytes used for memory predictions come from one formula.

The model is a Llama-style decoder: RMSNorm, grouped-query attention with separate q/k/v/o
projections, SwiGLU feed-forward (three matrices), untied input embedding and output head.
MoE layers replace the feed-forward by `experts` SwiGLU experts of width `ffn` (each token
uses `active_experts` of them) plus `shared_experts` always-on experts and a router.
Norm weights are counted; biases do not exist in these models. Qwen3's per-head q/k norms
(2 x head_dim per layer) are too small to matter and are left out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from transit.errors import UsageError

# bytes of one element of the compute dtype (bf16) that activations are stored in
ACTIVATION_ELEMENT_BYTES = 2
# Cross-entropy over the vocabulary, per token and vocabulary entry, at its peak in backward:
# bf16 logits (2) + the fp32 log-softmax kept for backward (4) + the dense fp32 gradient that
# nll_loss's backward materializes (4) + log-softmax's fp32 input gradient (4). Measured on an
# H200 (bench/results/plan-accuracy.json): 10 bytes under-predicted the peak by 7-21%.
LOGITS_BYTES_PER_ELEMENT = 14


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    ffn: int  # feed-forward width of the dense MLP, or of one expert in an MoE layer
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int = 0  # 0: hidden // heads
    experts: int = 0  # 0: dense model
    active_experts: int = 0  # routed experts each token goes through
    shared_experts: int = 0  # experts every token goes through in addition

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab"):
            if getattr(self, field) <= 0:
                raise UsageError(f"model {field} must be a positive integer, got {getattr(self, field)}")
        for field in ("head_dim", "experts", "active_experts", "shared_experts"):
            if getattr(self, field) < 0:
                raise UsageError(f"model {field} must be 0 or more, got {getattr(self, field)}")
        if self.heads % self.kv_heads:
            raise UsageError(f"heads ({self.heads}) must be a multiple of kv heads ({self.kv_heads})")
        if self.head_dim == 0:
            if self.hidden % self.heads:
                raise UsageError(f"hidden ({self.hidden}) is not divisible by heads ({self.heads}); "
                                 "give --head-dim")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.experts and not 0 < self.active_experts <= self.experts:
            raise UsageError(f"active experts must be between 1 and experts ({self.experts}), "
                             f"got {self.active_experts}")
        if not self.experts and (self.active_experts or self.shared_experts):
            raise UsageError("active/shared experts given for a dense model: set experts too")

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    # --- parameter counts ---------------------------------------------------------------------

    @property
    def attention_params(self) -> int:
        q_out = self.heads * self.head_dim
        kv_out = self.kv_heads * self.head_dim
        return self.hidden * q_out + 2 * self.hidden * kv_out + q_out * self.hidden

    @property
    def expert_params(self) -> int:
        """One SwiGLU MLP of width ffn (w1, w3: hidden->ffn, w2: ffn->hidden)."""
        return 3 * self.hidden * self.ffn

    def layer_params(self, active_only: bool = False) -> int:
        norms = 2 * self.hidden
        if not self.is_moe:
            mlp = self.expert_params
        else:
            routed = self.active_experts if active_only else self.experts
            mlp = (routed + self.shared_experts) * self.expert_params + self.hidden * self.experts
        return self.attention_params + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def total_params(self, active_only: bool = False) -> int:
        """Embedding + layers + final norm + output head."""
        return (2 * self.embedding_params + self.layers * self.layer_params(active_only)
                + self.hidden)

    # --- FLOPs ---------------------------------------------------------------------------------

    def model_flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token without recomputation (the convention per-GPU TFLOPS uses).

        6 x active parameters that do matrix multiplies (everything but the input embedding
        lookup) + attention scores and values: 12 x layers x heads x head_dim x seq_len
        (forward 2 matmuls of 2*s*d each per token, backward twice that; causal masking not
        discounted, as in TorchTitan's count).
        """
        matmul_params = self.total_params(active_only=True) - self.embedding_params
        return 6 * matmul_params + 12 * self.layers * self.heads * self.head_dim * seq_len

    # --- activations ---------------------------------------------------------------------------

    def layer_activation_bytes(self, tokens: int, tp: int = 1) -> int:
        """Bytes one layer keeps for backward without recomputation, for `tokens` tokens.

        Counted tensors (bf16), as TorchTitan's Llama layer saves them: attention-norm input and
        output (2h); q and the key/value heads repeated up to the query heads (TorchTitan
        repeats them so SDPA takes the flash kernel), the attention output and its contiguous
        copy fed to the output projection (5 x heads x head_dim; flash attention keeps no
        s x s matrix and its log-sum-exp is negligible); MLP-norm input and output (2h); and per
        SwiGLU expert a token passes through: w1 and w3 outputs, silu(w1) and the product fed
        to w2 (4 x ffn). Norms that upcast to fp32 (as PyTorch's composite RMSNorm does on CPU)
        keep more; fused GPU kernels keep less. Tensor parallelism with sequence parallelism
        divides every tensor by tp.
        """
        q_out = self.heads * self.head_dim
        experts_per_token = (self.active_experts + self.shared_experts) if self.is_moe else 1
        per_token = 4 * self.hidden + 5 * q_out + 4 * self.ffn * experts_per_token
        if self.is_moe:
            per_token += self.experts  # router scores
        return tokens * per_token * ACTIVATION_ELEMENT_BYTES // tp

    def layer_input_bytes(self, tokens: int, tp: int = 1) -> int:
        """The one tensor per layer that full activation checkpointing keeps."""
        return tokens * self.hidden * ACTIVATION_ELEMENT_BYTES // tp

    def logits_bytes(self, tokens: int, tp: int = 1) -> int:
        """Output logits and the loss's fp32 copies (vocabulary sharded by loss parallelism)."""
        return tokens * self.vocab * LOGITS_BYTES_PER_ELEMENT // tp

    def to_dict(self) -> dict:
        return asdict(self) | {"total_params": self.total_params(),
                               "active_params": self.total_params(active_only=True)}


# The paper's models (section 4.1) plus Llama3-8B, with dimensions from their published configs.
PRESETS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("llama3-8b", layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=128256),
        ModelSpec("llama3-70b", layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, vocab=128256),
        # Llama 4 Scout 17B-16E: every layer MoE, 16 routed experts (top-1) + 1 shared expert
        ModelSpec("llama4-scout", layers=48, hidden=5120, ffn=8192, heads=40, kv_heads=8, vocab=202048,
                  head_dim=128, experts=16, active_experts=1, shared_experts=1),
        ModelSpec("qwen3-32b", layers=64, hidden=5120, ffn=25600, heads=64, kv_heads=8, vocab=151936,
                  head_dim=128),
        # Qwen3-30B-A3B: 128 experts of width 768, 8 per token, no shared expert
        ModelSpec("qwen3-30b-a3b", layers=48, hidden=2048, ffn=768, heads=32, kv_heads=4, vocab=151936,
                  head_dim=128, experts=128, active_experts=8),
    )
}


def preset(name: str) -> ModelSpec:
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise UsageError(f"unknown model {name!r}; presets: {', '.join(PRESETS)}") from None
