"""Model shapes: parameter counts against published figures and hand-computed cases."""

import json
from pathlib import Path

import pytest

from transit.errors import UsageError
from transit.plan.models import PRESETS, ModelSpec, from_hf_config, preset

HF_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plan" / "hf"

# A model small enough to count by hand.
TINY = ModelSpec("tiny", layers=2, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=100)


def test_tiny_parameter_count_by_hand():
    # q 64x64, k and v 64x32 each (2 kv heads of 16), o 64x64
    assert TINY.attention_params == 4096 + 2 * 2048 + 4096
    assert TINY.layer_params() == 12288 + 3 * 64 * 128 + 2 * 64  # 36,992
    assert TINY.total_params() == 2 * 100 * 64 + 2 * 36_992 + 64


def test_tied_embeddings_and_qkv_biases_by_hand():
    tied = ModelSpec("t", layers=2, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=100, tied_embeddings=True,
                     qkv_bias=True)
    # biases: q 64 + k and v 32 each per layer; one 100 x 64 matrix for embedding and head
    assert tied.layer_params() == 36_992 + 128
    assert tied.total_params() == 100 * 64 + 2 * (36_992 + 128) + 64
    # the tied head still multiplies: 6 x (2 layers + head + final norm) + attention 12 x 2 x 4 x 16 x 8
    assert tied.model_flops_per_token(8) == 6 * (2 * 37_120 + 6400 + 64) + 12 * 2 * 4 * 16 * 8


@pytest.mark.parametrize("name, published", [
    ("llama3-8b", 8_030_261_248),  # Meta-Llama-3-8B safetensors total
    ("llama3-70b", 70_553_706_496),  # Meta-Llama-3-70B safetensors total
])
def test_llama_parameter_counts_match_published_totals(name, published):
    assert preset(name).total_params() == published


@pytest.mark.parametrize("name, total_b, active_b", [
    ("qwen3-32b", 32.8, 32.8),
    ("qwen3-30b-a3b", 30.5, 3.3),
    ("llama4-scout", 108, 17.2),  # 109B/17B in the model card, which also counts the vision parts
])
def test_moe_and_qwen_totals_and_active_parameters(name, total_b, active_b):
    model = preset(name)
    assert model.total_params() / 1e9 == pytest.approx(total_b, rel=0.02)
    assert model.total_params(active_only=True) / 1e9 == pytest.approx(active_b, rel=0.02)


def test_moe_layer_counts_all_experts_but_tokens_use_only_active_ones():
    moe = ModelSpec("moe", layers=1, hidden=8, ffn=4, heads=2, kv_heads=2, vocab=10, experts=4,
                    active_experts=1, shared_experts=1)
    expert = 3 * 8 * 4
    attention_and_norms = 4 * 8 * 8 + 2 * 8
    assert moe.layer_params() == attention_and_norms + 5 * expert + 8 * 4  # + router
    assert moe.layer_params(active_only=True) == attention_and_norms + 2 * expert + 8 * 4


def test_flops_per_token_by_hand():
    # 2 layers of 36,992 + the 100 x 64 head + the final norm 64 (the input embedding is a lookup)
    assert TINY.model_flops_per_token(16) == 6 * 80_448 + 12 * 2 * 4 * 16 * 16


def test_activation_bytes_by_hand():
    tokens = 10
    # 4h (two norms, in and out) + 5*q_out (q, k and v repeated to 4 heads, attention output and its
    # copy into the output projection) + 4*ffn, bf16
    per_token = 4 * 64 + 5 * 64 + 4 * 128
    assert TINY.layer_activation_bytes(tokens) == tokens * per_token * 2
    assert TINY.layer_activation_bytes(tokens, tp=2) == tokens * per_token
    assert TINY.layer_input_bytes(tokens) == tokens * 64 * 2
    assert TINY.logits_bytes(tokens) == tokens * 100 * 14


def test_all_presets_are_reachable_case_insensitively():
    for name in PRESETS:
        assert preset(name.upper()) is PRESETS[name]


@pytest.mark.parametrize("kwargs, message", [
    ({"layers": 0}, "layers must be a positive"),
    ({"heads": 6, "kv_heads": 4}, "multiple of kv heads"),
    ({"hidden": 60, "heads": 8, "kv_heads": 8}, "give --head-dim"),
    ({"experts": 4, "active_experts": 5}, "active experts"),
    ({"shared_experts": 1}, "dense model"),
])
def test_bad_dimensions_are_usage_errors(kwargs, message):
    dims = {"layers": 2, "hidden": 64, "ffn": 128, "heads": 4, "kv_heads": 2, "vocab": 100} | kwargs
    with pytest.raises(UsageError, match=message):
        ModelSpec("bad", **dims)


def test_unknown_preset_names_the_choices():
    with pytest.raises(UsageError, match="llama3-8b"):
        preset("gpt-5")


def llama_style_module(model: ModelSpec):
    """The same architecture built from torch modules, to count parameters independently."""
    from torch import nn

    q_out, kv_out = model.heads * model.head_dim, model.kv_heads * model.head_dim

    def swiglu() -> nn.ModuleList:
        return nn.ModuleList([nn.Linear(model.hidden, model.ffn, bias=False),
                              nn.Linear(model.ffn, model.hidden, bias=False),
                              nn.Linear(model.hidden, model.ffn, bias=False)])

    def layer() -> nn.Module:
        mlp = (nn.ModuleList([swiglu() for _ in range(model.experts + model.shared_experts)]
                             + [nn.Linear(model.hidden, model.experts, bias=False)])
               if model.is_moe else swiglu())
        return nn.ModuleList([nn.RMSNorm(model.hidden), nn.Linear(model.hidden, q_out, bias=False),
                              nn.Linear(model.hidden, kv_out, bias=False), nn.Linear(model.hidden, kv_out, bias=False),
                              nn.Linear(q_out, model.hidden, bias=False), nn.RMSNorm(model.hidden), mlp])

    return nn.ModuleList([nn.Embedding(model.vocab, model.hidden), *[layer() for _ in range(model.layers)],
                          nn.RMSNorm(model.hidden), nn.Linear(model.hidden, model.vocab, bias=False)])


@pytest.mark.parametrize("model", [
    TINY,
    ModelSpec("gqa-wide-heads", layers=3, hidden=48, ffn=80, heads=6, kv_heads=2, vocab=50, head_dim=16),
    ModelSpec("moe", layers=2, hidden=32, ffn=24, heads=4, kv_heads=1, vocab=40, experts=4, active_experts=2,
              shared_experts=1),
], ids=lambda m: m.name)
def test_parameter_count_matches_a_real_torch_module(model):
    module = llama_style_module(model)
    assert model.total_params() == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name, published_total, active", [
    ("llama-3-8b", 8_030_261_248, None),  # Meta-Llama-3-8B safetensors total
    ("mistral-7b-v0.1", 7_241_732_096, None),  # Mistral-7B-v0.1
    ("qwen2.5-7b", 7_615_616_512, None),  # Qwen2.5-7B (q/k/v biases)
    ("mixtral-8x7b-v0.1", 46_702_792_704, 12.9e9),  # Mixtral-8x7B-v0.1: 46.7B total, 12.9B active (model card)
])
def test_hf_configs_give_the_published_parameter_counts(name, published_total, active):
    model = from_hf_config(str(HF_FIXTURES / f"{name}.json"))
    assert model.name == name
    assert model.total_params() == published_total
    if active:
        assert model.is_moe and model.total_params(active_only=True) == pytest.approx(active, rel=0.01)


def test_hf_config_dimensions_by_name():
    model = from_hf_config(str(HF_FIXTURES / "mixtral-8x7b-v0.1.json"))
    assert (model.hidden, model.layers, model.heads, model.kv_heads, model.ffn, model.vocab, model.head_dim,
            model.experts, model.active_experts) == (4096, 32, 32, 8, 14336, 32000, 128, 8, 2)


def test_a_config_json_in_a_model_directory_is_named_after_the_directory(tmp_path):
    config = json.loads((HF_FIXTURES / "qwen2.5-7b.json").read_text())
    directory = tmp_path / "Qwen2.5-7B"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    assert from_hf_config(str(directory / "config.json")).name == "Qwen2.5-7B"


def test_qwen3_32b_with_untied_embeddings_has_its_published_total(tmp_path):
    # Qwen3-32B's published config, the keys the planner reads: 32.8B parameters
    config = {"model_type": "qwen3", "hidden_size": 5120, "num_hidden_layers": 64, "num_attention_heads": 64,
              "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936,
              "tie_word_embeddings": False}
    path = tmp_path / "qwen3-32b.json"
    path.write_text(json.dumps(config))
    assert round(from_hf_config(str(path)).total_params() / 1e8) == 328


def test_qwen3_moe_takes_the_expert_width_from_moe_intermediate_size(tmp_path):
    # Qwen3-30B-A3B's published config, the keys the planner reads
    config = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
              "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
              "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "tie_word_embeddings": False}
    path = tmp_path / "qwen3-30b-a3b.json"
    path.write_text(json.dumps(config))
    assert from_hf_config(str(path)) == ModelSpec("qwen3-30b-a3b", layers=48, hidden=2048, ffn=768, heads=32,
                                                  kv_heads=4, vocab=151936, head_dim=128, experts=128,
                                                  active_experts=8)


@pytest.mark.parametrize("change, message", [
    ({"model_type": "gpt2"}, "model_type 'gpt2' is not one of"),
    ({"hidden_size": None}, "lacks hidden_size"),
    ({"num_hidden_layers": 2.5}, "num_hidden_layers must be an integer, got 2.5"),
    ({"vocab_size": -3}, "vocab_size in bad.json must be at least 1, got -3"),
    ({"num_attention_heads": 10**9}, "num_attention_heads in bad.json must be at most 16384"),
    ({"decoder_sparse_step": 2}, "dense layers between MoE layers"),
    # a string would read as tied (bool("false") is True): Qwen3-32B planned as 32.0B instead of 32.8B
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings must be true or false \\(a JSON boolean\\), got 'false'"),
    ({"tie_word_embeddings": 0}, "tie_word_embeddings must be true or false \\(a JSON boolean\\), got 0"),
])
def test_bad_hf_configs_name_the_key(tmp_path, change, message):
    config = json.loads((HF_FIXTURES / "llama-3-8b.json").read_text()) | change
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    with pytest.raises(UsageError, match=message):
        from_hf_config(str(path))


@pytest.mark.parametrize("text, message", [("{", "is not JSON"), ("[1]", "is not a JSON object")])
def test_hf_config_that_is_not_a_json_object(tmp_path, text, message):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        from_hf_config(str(path))
