"""Transformer model shapes, their parameter counts, FLOPs and activation sizes.

Shared by the planner (`transit plan`) and the GPU benchmark harness, so that the FLOPs used
for per-GPU TFLOPS and the bytes used for memory predictions come from one formula.

The model is a Llama-style decoder: RMSNorm, grouped-query attention with separate q/k/v/o
projections (q/k/v biases in Qwen2), SwiGLU feed-forward (three matrices), an input embedding and
an output head (one shared matrix when the config ties them).
MoE layers replace the feed-forward by `experts` SwiGLU experts of width `ffn` (each token
uses `active_experts` of them) plus `shared_experts` always-on experts and a router.
Norm weights are counted; biases do not exist in these models. Qwen3's per-head q/k norms
(2 x head_dim per layer) are too small to matter and are left out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

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
    qkv_bias: bool = False  # q, k and v projections have biases (Qwen2)
    tied_embeddings: bool = False  # the output head is the input embedding's matrix

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
        biases = q_out + 2 * kv_out if self.qkv_bias else 0
        return self.hidden * q_out + 2 * self.hidden * kv_out + q_out * self.hidden + biases

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

    @property
    def head_params(self) -> int:
        """The output head's own parameters (none when it is the embedding's matrix)."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def total_params(self, active_only: bool = False) -> int:
        """Embedding + layers + final norm + output head."""
        return (self.embedding_params + self.head_params + self.layers * self.layer_params(active_only)
                + self.hidden)

    # --- FLOPs ---------------------------------------------------------------------------------

    def model_flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token without recomputation (the convention per-GPU TFLOPS uses).

        6 x active parameters that do matrix multiplies (everything but the input embedding
        lookup) + attention scores and values: 12 x layers x heads x head_dim x seq_len
        (forward 2 matmuls of 2*s*d each per token, backward twice that; causal masking not
        discounted, as in TorchTitan's count).
        """
        matmul_params = self.layers * self.layer_params(active_only=True) + self.vocab * self.hidden + self.hidden
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


# Hugging Face config.json keys for each ModelSpec field, the first one present wins. MoE: Mixtral
# names its experts num_local_experts, Qwen-MoE num_experts with the expert width in
# moe_intermediate_size (its intermediate_size is the width of a dense layer it does not have).
HF_KEYS = {
    "hidden": ("hidden_size",),
    "layers": ("num_hidden_layers",),
    "heads": ("num_attention_heads",),
    "kv_heads": ("num_key_value_heads", "num_attention_heads"),
    "vocab": ("vocab_size",),
    "head_dim": ("head_dim",),
    "experts": ("num_local_experts", "num_experts"),
    "active_experts": ("num_experts_per_tok",),
}
DENSE_FFN_KEYS = ("intermediate_size",)
EXPERT_FFN_KEYS = ("moe_intermediate_size", "intermediate_size")
# Architectures whose layers the model above describes (model_type in config.json).
HF_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe")
QKV_BIAS_MODEL_TYPES = ("qwen2",)  # Qwen2 has q/k/v biases without saying so in its config


def _read_json_object(path: str) -> dict:
    try:
        config = json.loads(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"--hf-config {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--hf-config {path} is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise UsageError(f"--hf-config {path} is not a JSON object")
    return config


def from_hf_config(path: str) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (Llama, Mistral, Mixtral, Qwen2/2.5, Qwen3, Qwen3-MoE)."""
    from transit.plan.bounds import BOUNDS, parse_value

    config = _read_json_object(path)
    model_type = config.get("model_type")
    if model_type not in HF_MODEL_TYPES:
        raise UsageError(f"--hf-config {path}: model_type {model_type!r} is not one of {', '.join(HF_MODEL_TYPES)}")
    if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
        raise UsageError(f"--hf-config {path}: dense layers between MoE layers (mlp_only_layers, "
                         "decoder_sparse_step) are not modelled")

    def value(field: str, keys: tuple[str, ...]) -> int | None:
        key = next((k for k in keys if config.get(k) is not None), None)
        if key is None:
            return None
        if isinstance(config[key], bool) or not isinstance(config[key], int):
            raise UsageError(f"--hf-config {path}: {key} must be an integer, got {config[key]!r}")
        return int(parse_value(f"{key} in {Path(path).name}", str(config[key]), BOUNDS[field]))

    dims = {field: v for field, keys in HF_KEYS.items() if (v := value(field, keys)) is not None}
    if not dims.get("experts"):
        dims.pop("experts", None)
        dims.pop("active_experts", None)  # a dense config may carry the MoE defaults
    ffn = value("ffn", EXPERT_FFN_KEYS if "experts" in dims else DENSE_FFN_KEYS)
    if ffn is not None:
        dims["ffn"] = ffn
    missing = [keys[0] for field, keys in (*HF_KEYS.items(), ("ffn", DENSE_FFN_KEYS))
               if field in ("hidden", "layers", "heads", "vocab", "ffn") and field not in dims]
    if missing:
        raise UsageError(f"--hf-config {path} lacks {', '.join(missing)}")
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):  # "false" as a string would read as tied: 0.8B parameters fewer for Qwen3-32B
        raise UsageError(f"--hf-config {path}: tie_word_embeddings must be true or false (a JSON boolean), "
                         f"got {tied!r}")
    name = Path(path).resolve().parent.name if Path(path).name == "config.json" else Path(path).stem
    return ModelSpec(name=name, qkv_bias=model_type in QKV_BIAS_MODEL_TYPES, tied_embeddings=tied, **dims)
