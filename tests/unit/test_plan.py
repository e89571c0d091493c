"""Planner: memory model against hand-computed cases, the common-multiple rule, errors."""

import argparse
import json

import pytest

from transit import plan
from transit.errors import UsageError
from transit.models import ModelSpec, preset
from transit.plan import (
    CLUSTER_PRESETS,
    FRAMEWORK_RESERVED_BYTES,
    GIB,
    HOST_BYTES_PER_RANK,
    ClusterSpec,
    TrainingConfig,
    accumulation_steps,
    common_global_batch,
    predict_memory,
)

TINY = ModelSpec("tiny", layers=2, hidden=64, ffn=128, heads=4, kv_heads=4, vocab=100)
TINY_PARAMS = 2 * 100 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64  # 95040
TINY_LAYER = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64  # 41088


def test_tiny_mixed_fsdp_memory_by_hand():
    config = TrainingConfig(TINY, precision="mixed", local_batch=1, seq_len=16)
    memory = predict_memory(config, world_size=2)
    shard = TINY_PARAMS / 2
    assert (memory.params, memory.grads, memory.optimizer) == (shard * 4, shard * 4, shard * 8)
    # a layer (the largest FSDP unit here) being reduced: bf16 params and grads + fp32 reduce-scatter
    # input; one more prefetched: bf16 params
    assert memory.gathered == TINY_LAYER * (2 + 2 + 4 + 2)
    # checkpointed: one layer input per layer ...
    assert memory.activations == 2 * 16 * 64 * 2
    # ... plus the larger of one recomputed layer (bf16) and the loss over the logits: here the layer
    per_token_layer = 4 * 64 + 5 * 64 + 4 * 128
    assert 16 * per_token_layer * 2 > 16 * 100 * 14
    assert memory.transient == 16 * per_token_layer * 2
    assert memory.device_total == (16 * TINY_PARAMS / 2 + memory.gathered + memory.activations + memory.transient
                                   + FRAMEWORK_RESERVED_BYTES)


def test_the_loss_over_a_large_vocabulary_sets_the_transient_peak():
    model = ModelSpec("wide-vocab", layers=2, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=50_000)
    memory = predict_memory(TrainingConfig(model, local_batch=1, seq_len=16), world_size=1)
    # bf16 logits, fp32 log-softmax, nll_loss's dense fp32 gradient, log-softmax's fp32 input gradient
    assert memory.transient == 16 * 50_000 * (2 + 4 + 4 + 4)


def test_the_output_head_is_the_largest_fsdp_unit_of_a_large_vocabulary_model():
    model = preset("llama3-8b")  # 525M-parameter head vs 218M-parameter layers
    memory = predict_memory(TrainingConfig(model, precision="bf16"), 8)
    assert memory.gathered == (128256 * 4096 + 4096) * (2 + 2 + 2)


def test_a_single_rank_needs_no_nccl_buffers():
    config = TrainingConfig(TINY, seq_len=16)
    assert predict_memory(config, 2).framework == FRAMEWORK_RESERVED_BYTES
    assert predict_memory(config, 1).framework == FRAMEWORK_RESERVED_BYTES - plan.NCCL_BUFFER_BYTES


def test_bf16_states_take_half_of_mixed_and_ddp_does_not_shard():
    mixed = predict_memory(TrainingConfig(TINY, precision="mixed", seq_len=16), 4)
    bf16 = predict_memory(TrainingConfig(TINY, precision="bf16", seq_len=16), 4)
    assert bf16.params + bf16.grads + bf16.optimizer == (mixed.params + mixed.grads + mixed.optimizer) / 2
    ddp = predict_memory(TrainingConfig(TINY, precision="bf16", data_parallel="ddp", seq_len=16), 4)
    assert bf16.gathered == TINY_LAYER * (2 + 2 + 2)  # bf16 grads are reduce-scattered as they are
    assert ddp.params == TINY_PARAMS * 2 and ddp.gathered == 0


def test_no_checkpointing_keeps_every_layer():
    config = TrainingConfig(TINY, seq_len=16, local_batch=2, activation_checkpointing=False)
    memory = predict_memory(config, 1)
    assert (memory.activations, memory.transient) == (2 * TINY.layer_activation_bytes(32), TINY.logits_bytes(32))


def test_tp_and_pp_divide_states_and_the_larger_stage_counts():
    model = preset("llama3-70b")
    config = TrainingConfig(model, precision="bf16", tp=4, pp=4, local_batch=8, seq_len=4096)
    memory = predict_memory(config, world_size=32)  # DP 2
    assert memory.params == round(model.total_params() / (4 * 4 * 2) * 2)
    # first stage: 20 layers x 4 micro-batches of checkpoints + one layer recomputed
    layer = model.layer_activation_bytes(4096, 4)
    first = (20 * model.layer_input_bytes(4096, 4) * 4, layer)
    # last stage: one micro-batch, but the logits (vocabulary split over TP) too
    last = (20 * model.layer_input_bytes(4096, 4), max(layer, model.logits_bytes(4096, 4)))
    # the last stage's logits (14 bytes per entry, 128K vocabulary) outweigh 4 micro-batches of checkpoints
    assert (memory.activations, memory.transient) == max(first, last, key=sum) == last


def test_llama3_70b_needs_six_h100_nodes_of_four_gpus_as_in_the_paper():
    # Section 4.2: the minimum configuration without offloading is 6 nodes (24 GPUs).
    cluster = ClusterSpec(**(CLUSTER_PRESETS["h100"].to_dict() | {"gpus_per_node": 4}))
    result = plan.plan(TrainingConfig(preset("llama3-70b")), cluster, nodes=6)
    assert result["min_native_nodes"] == 6
    assert [c["fits_natively"] for c in result["candidates"]] == [True] + [False] * 5


@pytest.mark.parametrize("local, dps, target, expected", [
    (1, [24, 20, 16, 12, 8, 4], 24, 240),
    (1, [24, 20, 16, 12, 8, 4], 241, 480),
    (2, [4, 2], 1, 8),
    (4, [6, 4], 100, 144),  # lcm(24, 16) = 48; 48 x 3 is the first multiple >= 100
])
def test_common_global_batch(local, dps, target, expected):
    result = common_global_batch(local, dps, target)
    assert result == expected
    assert all(result % (local * dp) == 0 for dp in dps) and result >= target


def test_accumulation_steps_make_up_the_difference_and_reject_indivisible_batches():
    assert accumulation_steps(240, 1, 24) == 10
    assert accumulation_steps(240, 2, 4) == 30
    with pytest.raises(UsageError, match="global batch 12 is not divisible by local batch 1 x DP degree 8"):
        accumulation_steps(12, 1, 8)


def small_cluster(**overrides):
    base = {"gpus_per_node": 2, "hbm_bytes": 4 * GIB, "host_dram_bytes": 64 * GIB,
            "pcie_bytes_per_s": 10e9, "sustained_flops": 1e12}
    return ClusterSpec(**(base | overrides))


def test_plan_spills_what_does_not_fit_and_keeps_one_global_batch():
    # 0.5B-ish params in mixed precision: 16 bytes/param sharded over the GPUs
    model = ModelSpec("m", layers=8, hidden=2048, ffn=5632, heads=16, kv_heads=16, vocab=32000)
    config = TrainingConfig(model, local_batch=2, seq_len=1024)
    cluster = small_cluster(hbm_bytes=6 * GIB)
    result = plan.plan(config, cluster, nodes=4, target_global_batch=20)
    counts = [c["nodes"] for c in result["candidates"]]
    assert counts == [4, 3, 2, 1]
    assert result["global_batch"] == 48  # lcm(2*8, 2*6, 2*4, 2*2) = 48 >= 20
    for c in result["candidates"]:
        needed = predict_memory(config, c["gpus"]).device_total
        assert c["spilled_bytes"] == max(0, needed - cluster.hbm_bytes)
        assert c["host_bytes_per_node"] == 2 * (c["spilled_bytes"] + HOST_BYTES_PER_RANK)
        assert c["grad_accum"] * 2 * c["dp"] == 48
    assert result["candidates"][0]["fits_natively"] and not result["candidates"][-1]["fits_natively"]
    effs = [c["efficiency"] for c in result["candidates"]]
    assert effs[0] == 1.0 and effs == sorted(effs, reverse=True) and effs[-1] < 1.0


def test_efficiency_by_hand():
    config = TrainingConfig(TINY, seq_len=16, activation_checkpointing=False)
    memory = predict_memory(config, 1)
    cluster = small_cluster(hbm_bytes=memory.device_total - 1000)  # 1000 bytes spilled, all optimizer state
    result = plan.efficiency(config, memory, cluster, global_batch=4, world_size=1, accumulation=4)
    compute = TINY.model_flops_per_token(16) * 4 * 16 / 1e12
    assert result["compute_s"] == pytest.approx(compute)
    assert result["pcie_bytes"] == 2 * 1000  # cold: moved once per optimizer step, in and out
    assert result["efficiency"] == pytest.approx(compute / (compute + 2000 / 10e9))


def test_plan_stops_at_the_smallest_count_whose_spill_fits_in_host_dram():
    model = ModelSpec("m", layers=8, hidden=2048, ffn=5632, heads=16, kv_heads=16, vocab=32000)
    config = TrainingConfig(model, seq_len=1024)
    # 3 nodes need 19.0 GiB of host DRAM per node, 2 nodes 20.35 GiB
    result = plan.plan(config, small_cluster(hbm_bytes=3 * GIB, host_dram_bytes=20 * GIB), nodes=4)
    assert [c["nodes"] for c in result["candidates"]] == [4, 3]
    assert result["min_feasible_nodes"] == 3


def test_plan_skips_counts_that_cannot_host_whole_pipelines():
    model = ModelSpec("m", layers=8, hidden=64, ffn=128, heads=4, kv_heads=4, vocab=100)
    config = TrainingConfig(model, pp=4, local_batch=4, seq_len=16)
    result = plan.plan(config, small_cluster(), nodes=4)
    assert [(c["nodes"], c["dp"]) for c in result["candidates"]] == [(4, 2), (2, 1)]


@pytest.mark.parametrize("kwargs, cluster, message", [
    ({"tp": 4}, {"gpus_per_node": 2}, "TP degree 4 does not divide 2 GPUs per node"),
    ({"pp": 3}, {}, "not a multiple of TP x PP = 3"),
    ({}, {"host_dram_bytes": 1 * GIB}, "host DRAM too small for the spill"),
    ({}, {"hbm_bytes": FRAMEWORK_RESERVED_BYTES}, "does not even hold the framework"),
])
def test_impossible_plans_name_the_cause(kwargs, cluster, message):
    model = ModelSpec("m", layers=8, hidden=2048, ffn=5632, heads=16, kv_heads=16, vocab=32000)
    with pytest.raises(UsageError, match=message):
        plan.plan(TrainingConfig(model, seq_len=1024, **kwargs), small_cluster(**cluster), nodes=2)


def test_pipeline_deeper_than_the_model_is_refused():
    with pytest.raises(UsageError, match="pipeline degree 3 is larger than the model's 2 layers"):
        TrainingConfig(TINY, pp=3)


def run_cli(argv):
    parser = argparse.ArgumentParser()
    plan.register(parser.add_subparsers())
    args = parser.parse_args(["plan", *argv])
    return args.func(args)


def test_cli_json_with_explicit_dimensions(capsys):
    assert run_cli(["--layers", "2", "--hidden", "64", "--ffn", "128", "--heads", "4", "--vocab", "100",
                    "--nodes", "3", "--gpus-per-node", "2", "--hbm-gib", "4", "--seq-len", "16", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"]["total_params"] == TINY_PARAMS
    assert [c["dp"] for c in result["candidates"]] == [6, 4, 2]
    assert result["global_batch"] == 12


def test_cli_plot_writes_a_png(tmp_path, capsys):
    png = tmp_path / "plan.png"
    assert run_cli(["--model", "llama3-70b", "--nodes", "6", "--gpus-per-node", "4", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_cli_table_and_preset_override(capsys):
    assert run_cli(["--model", "llama3-8b", "--layers", "4", "--nodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "llama3-8b(custom)" in out and "Global batch 16" in out


def test_cli_without_model_names_missing_dimensions():
    with pytest.raises(UsageError, match="missing --ffn, --heads, --vocab"):
        run_cli(["--layers", "2", "--hidden", "64", "--nodes", "1"])
