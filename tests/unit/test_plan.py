"""Planner: the memory model, the candidate counts and their common global batch, the output.

Every expected figure is written out (worked by hand in the comments), never computed with the
code under test.
"""

import json
import re
from pathlib import Path

import pytest

from transit import cli
from transit.errors import UsageError
from transit.plan import planner
from transit.plan.models import ModelSpec, preset
from transit.plan.planner import (
    CLUSTER_PRESETS,
    FRAMEWORK_RESERVED_BYTES,
    GIB,
    ClusterSpec,
    Layout,
    TrainingConfig,
    accumulation_steps,
    candidate_counts,
    common_global_batch,
    predict_memory,
)

TINY = ModelSpec("tiny", layers=2, hidden=64, ffn=128, heads=4, kv_heads=4, vocab=100)
TINY_PARAMS = 2 * 100 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64  # 95040
TINY_LAYER = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64  # 41088
# 600 MiB CUDA context + 1 GiB NCCL buffers + 512 MiB workspaces
FRAMEWORK = 629_145_600 + 1_073_741_824 + 536_870_912
# 542,148,608 parameters: embedding and head 2 x 32000 x 2048, 8 layers of 4 x 2048^2 (attention)
# + 3 x 2048 x 5632 (MLP) + 2 x 2048 (norms), final norm 2048
MEDIUM = ModelSpec("m", layers=8, hidden=2048, ffn=5632, heads=16, kv_heads=16, vocab=32000)


def test_framework_constant_is_the_sum_of_its_parts():
    assert FRAMEWORK_RESERVED_BYTES == FRAMEWORK == 2_239_758_336


def test_tiny_mixed_fsdp_memory_by_hand():
    config = TrainingConfig(TINY, precision="mixed", local_batch=1, seq_len=16)
    memory = predict_memory(config, world_size=2)
    # 95040 parameters over 2 ranks: fp32 params and grads (4 bytes), Adam m and v (8 bytes)
    assert (memory.params, memory.grads, memory.optimizer) == (190_080, 190_080, 380_160)
    # a layer (the largest FSDP unit here) being reduced: bf16 params and grads + fp32 reduce-scatter
    # input; one more prefetched: bf16 params: 41088 x (2 + 2 + 4 + 2)
    assert memory.gathered == 410_880
    # checkpointed: one layer input per layer, 2 layers x 16 tokens x 64 x 2 bytes ...
    assert memory.activations == 4096
    # ... plus the larger of one recomputed layer (16 x (4*64 + 5*64 + 4*128) x 2 = 34,816) and the
    # loss over the logits (16 x 100 x 14 = 22,400)
    assert memory.transient == 34_816
    assert memory.device_total == 190_080 * 2 + 380_160 + 410_880 + 4096 + 34_816 + FRAMEWORK


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
    assert predict_memory(config, 2).framework == FRAMEWORK
    assert predict_memory(config, 1).framework == 629_145_600 + 536_870_912


def test_bf16_states_take_half_of_mixed_and_ddp_does_not_shard():
    bf16 = predict_memory(TrainingConfig(TINY, precision="bf16", seq_len=16), 4)
    # 95040 / 4 = 23760 parameters per rank: 2 + 2 + 4 bytes
    assert (bf16.params, bf16.grads, bf16.optimizer) == (47_520, 47_520, 95_040)
    assert bf16.gathered == TINY_LAYER * (2 + 2 + 2)  # bf16 grads are reduce-scattered as they are
    ddp = predict_memory(TrainingConfig(TINY, precision="bf16", data_parallel="ddp", seq_len=16), 4)
    assert ddp.params == TINY_PARAMS * 2 and ddp.gathered == 0


def test_no_checkpointing_keeps_every_layer():
    config = TrainingConfig(TINY, seq_len=16, local_batch=2, activation_checkpointing=False)
    memory = predict_memory(config, 1)
    # 2 layers x 32 tokens x (4*64 + 5*64 + 4*128 = 1088) x 2 bytes; the logits 32 x 100 x 14
    assert (memory.activations, memory.transient) == (139_264, 44_800)


def test_tp_and_pp_divide_states_and_the_larger_stage_counts():
    config = TrainingConfig(preset("llama3-70b"), precision="bf16", tp=4, pp=4, local_batch=8, seq_len=4096)
    memory = predict_memory(config, world_size=32)  # DP 2
    assert memory.params == 4_409_606_656  # 70,553,706,496 parameters / (4 x 4 x 2) x 2 bytes
    # first stage: 20 layers x 4 micro-batches of checkpoints (4096 x 8192 x 2 / 4 = 16,777,216 each)
    #   + one recomputed layer: 4096 x (4 x 8192 + 5 x 8192 + 4 x 28672) x 2 / 4 = 385,875,968
    # last stage: 20 x 16,777,216 = 335,544,320 + the logits 4096 x 128256 x 14 / 4 = 1,838,678,016,
    # which outweigh 4 micro-batches of checkpoints
    assert (memory.activations, memory.transient) == (335_544_320, 1_838_678_016)


def test_llama3_70b_fits_six_h100_nodes_of_four_gpus_as_in_the_paper_but_within_the_margin():
    # Section 4.2: the minimum configuration without offloading is 6 nodes (24 GPUs). The model
    # agrees, by 0.27 GiB of 79.6: inside the 2-9% it under-predicts by, so 6 and 7 nodes are within
    # the margin and 8 is the smallest count that fits with it
    cluster = ClusterSpec(**(CLUSTER_PRESETS["h100"].to_dict() | {"gpus_per_node": 4}))
    result = planner.plan(TrainingConfig(preset("llama3-70b")), cluster, nodes=8, candidates=[8, 7, 6, 5])
    assert result["min_native_nodes"] == 8
    rows = result["candidates"]
    assert [c["verdict"] for c in rows] == ["fits in HBM", "within margin", "within margin", "spills to host"]
    assert [c["spilled_bytes"] for c in rows][:3] == [0, 0, 0]
    assert 0 < cluster.hbm_bytes - rows[2]["device_bytes_needed"] < 0.3 * GIB


def test_the_safety_margin_covers_every_measured_under_prediction():
    accuracy = json.loads((Path(__file__).resolve().parents[2] / "bench" / "results" /
                           "plan-accuracy.json").read_text())
    worst = max(-row["error"] for row in accuracy["rows"])
    assert 0.09 < worst <= planner.HBM_SAFETY_MARGIN  # 9.05%: policies-h200 native, deterministic


@pytest.mark.parametrize("step_sizes, target, expected", [
    ([24, 20, 16, 12, 8, 4], 24, 240),  # lcm 240
    ([24, 20, 16, 12, 8, 4], 241, 480),
    ([8, 4], 1, 8),
    ([24, 16], 100, 144),  # lcm 48; 48 x 3 is the first multiple >= 100
    ([128, 96, 64], 1024, 1152),  # the issue's 16, 12, 8 nodes of 8 GPUs: lcm 384, x 3
    ([3], 10**23 + 1, 100_000_000_000_000_000_000_002),  # exact where a float ceiling is not
])
def test_common_global_batch(step_sizes, target, expected):
    assert common_global_batch(step_sizes, target) == expected


def test_accumulation_steps_make_up_the_difference_and_reject_indivisible_batches():
    assert accumulation_steps(240, 1, 24) == 10
    assert accumulation_steps(240, 2, 4) == 30
    with pytest.raises(UsageError, match="global batch 12 is not divisible by local batch 1 x DP degree 8"):
        accumulation_steps(12, 1, 8)


@pytest.mark.parametrize("kwargs, expected", [
    ({"defaults": [16, 12, 8, 3]}, [16, 12, 8, 3]),
    ({"scale_in": [0.25, 0.5]}, [16, 12, 8]),
    ({"candidates": [8, 12, 16, 12]}, [16, 12, 8]),
    ({"candidates": [12]}, [16, 12]),  # --nodes is always a candidate
    ({}, [16]),
])
def test_candidate_counts(kwargs, expected):
    assert candidate_counts(16, **kwargs) == expected


def test_candidates_above_the_requested_count_are_refused():
    with pytest.raises(UsageError, match="--candidates 20 is more than --nodes 16"):
        candidate_counts(16, candidates=[20, 8])


def test_node_counts_must_host_whole_tp_x_pp_groups():
    layout = Layout(gpus_per_node=8, tp=8, pp=4, local_batch=1)  # a group spans 4 nodes
    assert layout.count_step == 4 and layout.dp(12) == 3
    with pytest.raises(UsageError, match="--candidates 6: 6 nodes x 8 GPUs are not a multiple of TP x PP = 32"):
        layout.check_count(6, "--candidates")


def test_batch_of_a_candidate_set():
    batch = Layout(gpus_per_node=8, tp=1, pp=1, local_batch=1).batch([16, 12, 8], 1024)
    assert batch == {"counts": [16, 12, 8], "lcm": 384, "global_batch": 1152, "overshoot": pytest.approx(0.125),
                     "within_overshoot": True, "grad_accum": {"16": 9, "12": 12, "8": 18}}


def test_sets_near_one_that_overshoots():
    # 16 -> 12 -> 8 nodes of 8 GPUs for 128 sequences: lcm(128, 96, 64) = 384, +200%. Dropping 12
    # keeps 128 exactly; then the pairs with the count nearest 8 that keep 128: 4 (DP 32) and 2 (DP 16);
    # 7, 9, 6, 10, 5, 11, 3, 13 (DP 56, 72, 48, 80, 40, 88, 24, 104) all overshoot
    proposals = planner.nearby_count_sets(Layout(8, 1, 1, 1), [16, 12, 8], 128, allowed=lambda count: True)
    assert [(p["counts"], p["global_batch"]) for p in proposals] == [([16, 8], 128), ([16, 4], 128), ([16, 2], 128)]


def test_sets_near_one_that_overshoots_keep_to_the_counts_allowed():
    proposals = planner.nearby_count_sets(Layout(8, 1, 1, 1), [16, 12, 8], 128, allowed=lambda count: count >= 5)
    assert [p["counts"] for p in proposals] == [[16, 8]]


def test_proposed_sets_leave_out_counts_over_twice_the_token_cost():
    # 4 -> 3 nodes of 2 GPUs for 16 sequences of 2: lcm(16, 12) = 48 (+200%). 2 and 1 node keep 16
    # but spill; under advise they stay within twice 4 nodes' per-token cost, under base they do not
    config = TrainingConfig(MEDIUM, local_batch=2, seq_len=1024)
    cluster = small_cluster(hbm_bytes=5 * GIB, sustained_flops=1e13)
    def proposed(policy):
        result = planner.plan(config, cluster, nodes=4, candidates=[3], target_global_batch=16, policy=policy)
        return [p["counts"] for p in result["proposals"]]
    assert proposed("advise") == [[4, 2], [4, 1]]
    assert proposed("base") == []


def small_cluster(**overrides):
    base = {"gpus_per_node": 2, "hbm_bytes": 6 * GIB, "host_dram_bytes": 64 * GIB,
            "pcie_bytes_per_s": 10e9, "sustained_flops": 1e12}
    return ClusterSpec(**(base | overrides))


def test_plan_spills_what_does_not_fit_and_keeps_one_global_batch():
    config = TrainingConfig(MEDIUM, local_batch=2, seq_len=1024)
    result = planner.plan(config, small_cluster(), nodes=4, candidates=[3, 2, 1], target_global_batch=30)
    # per GPU at W ranks: 542,148,608 x 16 / W bytes of states + 655,380,480 gathered (the head unit
    # 65,538,048 x 10) + 67,108,864 checkpoints + 917,504,000 logits + 2,239,758,336 framework
    assert [c["device_bytes_needed"] for c in result["candidates"]] == [
        4_964_048_896, 5_325_481_301, 6_048_346_112, 8_216_940_544]
    # HBM is 6 GiB = 6,442,450,944: only 1 node (2 GPUs) spills; host: 2 x (spill + 8 GiB per rank)
    assert [c["spilled_bytes"] for c in result["candidates"]] == [0, 0, 0, 1_774_489_600]
    assert [c["host_bytes_per_node"] for c in result["candidates"]] == [17_179_869_184] * 3 + [20_728_848_384]
    # 2 nodes fit by 394,104,832 bytes, less than the 10% margin (604,834,611)
    assert [c["verdict"] for c in result["candidates"]] == ["fits in HBM"] * 2 + ["within margin", "spills to host"]
    # local batch 2 x DP 8, 6, 4, 2: lcm(16, 12, 8, 4) = 48 for a target of 30 (+60%): too much;
    # 4 -> 2 -> 1 and 4 -> 1 or 4 -> 2 keep 32 (+7%)
    assert (result["global_batch"], result["within_overshoot"]) == (48, False)
    assert [c["grad_accum"] for c in result["candidates"]] == [3, 4, 6, 12]
    assert [p["counts"] for p in result["proposals"]] == [[4, 2, 1], [4, 1], [4, 2]]
    assert (result["min_runnable_nodes"], result["min_native_nodes"]) == (1, 3)
    effs = [c["efficiency"] for c in result["candidates"]]
    assert effs[:3] == [1.0, 1.0, 1.0] and effs[3] < 1.0
    assert result["policy"] == "advise" and result["step_time_error"] == planner.STEP_TIME_ERROR["advise"]


def test_step_time_by_hand():
    config = TrainingConfig(TINY, seq_len=16, activation_checkpointing=False)
    memory = predict_memory(config, 1)
    cluster = small_cluster(hbm_bytes=memory.device_total - 1000)  # 1000 bytes spilled, all optimizer state
    result = planner.step_time(config, memory, cluster, global_batch=4, world_size=1, accumulation=4, policy="base")
    # FLOPs per token: 6 x (2 x 41088 + 6400 + 64 = 88,640 matmul parameters) + 12 x 2 x 4 x 16 x 16
    compute = 556_416 * 4 * 16 / 1e12
    assert result["compute_s"] == pytest.approx(compute)
    assert result["pcie_bytes"] == 2 * 1000  # cold: moved once per optimizer step, in and out
    transfer = 47.7 * 2000 / 10e9  # base's calibrated factor x the copy time at 10 GB/s
    assert result["step_s"] == pytest.approx(compute + transfer)
    assert result["tokens_per_s_per_gpu"] == pytest.approx(64 / (compute + transfer))
    assert result["efficiency"] == pytest.approx(compute / (compute + transfer))


def test_a_policy_no_summary_calibrates_has_no_step_time():
    config = TrainingConfig(TINY, seq_len=16)
    result = planner.step_time(config, predict_memory(config, 1), small_cluster(), 4, 1, 4, policy="hybrid")
    assert (result["step_s"], result["tokens_per_s_per_gpu"], result["efficiency"]) == (None, None, None)


def test_default_candidates_keep_throughput_and_leave_costly_counts_out():
    # llama3-70b on 64 nodes of 4 H100 (the issue's case). Under advise the spill is read once a step:
    # 2 nodes keep 84% of 64 nodes' tokens per GPU, 1 node 77% (below 80%); 48 and 32 nodes (25%, 50%
    # fewer) fit in HBM. Under base (47.7 x the copy time) the smallest count that keeps 80% is 4.
    cluster = ClusterSpec(**(CLUSTER_PRESETS["h100"].to_dict() | {"gpus_per_node": 4}))
    config = TrainingConfig(preset("llama3-70b"))
    advise = planner.plan(config, cluster, nodes=64)
    assert advise["counts"] == [64, 48, 32, 2] and advise["min_runnable_nodes"] == 1
    shares = [c["tokens_per_s_per_gpu"] / advise["candidates"][0]["tokens_per_s_per_gpu"]
              for c in advise["candidates"]]
    assert shares[:3] == [1.0, 1.0, 1.0] and 0.8 <= shares[3] < 0.85
    one_node = planner.MemoryPlanner(config, cluster).timing(1, 256)["tokens_per_s_per_gpu"]
    assert one_node < 0.8 * advise["candidates"][0]["tokens_per_s_per_gpu"]
    assert planner.plan(config, cluster, nodes=64, policy="base")["counts"] == [64, 48, 32, 4]


def test_default_candidates_drop_a_reduction_over_twice_the_token_cost():
    # 4 nodes of 2 GPUs with 5 GiB: 2 nodes (50% fewer) spill 679,636,992 bytes per GPU; under base
    # that step costs more than twice 4 nodes' GPU time per token, so only 3 nodes (25% fewer, no
    # spill) is proposed, which is also the smallest count keeping 80%
    config = TrainingConfig(MEDIUM, local_batch=2, seq_len=1024)
    memory_planner = planner.MemoryPlanner(config, small_cluster(hbm_bytes=5 * GIB, sustained_flops=1e13), "base")
    reference = memory_planner.timing(4, 16)["tokens_per_s_per_gpu"]
    assert memory_planner.timing(2, 16)["tokens_per_s_per_gpu"] < reference / 2
    assert memory_planner.default_counts(4, 16) == [4, 3]


def test_the_smallest_runnable_count_is_found_by_bisection_as_a_scan_would():
    # 3 nodes need 19.0 GiB of host DRAM per node, 2 nodes 20.35 GiB
    config = TrainingConfig(MEDIUM, seq_len=1024)
    memory_planner = planner.MemoryPlanner(config, small_cluster(hbm_bytes=3 * GIB, host_dram_bytes=20 * GIB))
    assert [memory_planner.row(n)["runs"] for n in (1, 2, 3, 4)] == [False, False, True, True]
    assert memory_planner.smallest_with(4, "runs") == 3
    assert memory_planner.smallest_with(1000, "runs") == 3
    assert memory_planner.smallest_with(2, "runs") is None


def test_plan_skips_counts_that_cannot_host_whole_pipelines():
    model = ModelSpec("m", layers=8, hidden=64, ffn=128, heads=4, kv_heads=4, vocab=100)
    result = planner.plan(TrainingConfig(model, pp=4, local_batch=4, seq_len=16), small_cluster(), nodes=4)
    assert [(c["nodes"], c["dp"]) for c in result["candidates"]] == [(4, 2), (2, 1)]


@pytest.mark.parametrize("kwargs, cluster, message", [
    ({"tp": 4}, {"gpus_per_node": 2}, "--tp 4 does not divide the 2 GPUs per node \\(TP stays inside a node\\)"),
    ({"pp": 3}, {}, "--pp 3 does not divide the model's 8 layers"),
    ({}, {"host_dram_bytes": 1 * GIB}, "host DRAM too small for the spill"),
    ({}, {"hbm_bytes": FRAMEWORK}, "does not even hold the framework"),
])
def test_impossible_plans_name_the_cause(kwargs, cluster, message):
    with pytest.raises(UsageError, match=message):
        planner.plan(TrainingConfig(MEDIUM, seq_len=1024, **kwargs), small_cluster(**cluster), nodes=2)


def test_no_overflow_at_the_largest_counts():
    # the issue: 677 nodes and up crashed with OverflowError, 64 nodes planned 9.46e27 sequences
    config, cluster = TrainingConfig(preset("llama3-8b")), CLUSTER_PRESETS["h100"]
    result = planner.plan(config, cluster, nodes=100_000)
    # fits in HBM on 1 node, so every count keeps the throughput: DP 800,000, 600,000, 400,000 and 8
    assert (result["counts"], result["global_batch"]) == ([100_000, 75_000, 50_000, 1], 2_400_000)
    # math.lcm(800000, 799992, 799984, 799976, 799968) = 3.33e24
    with pytest.raises(UsageError, match=r"the global batch common to 100000,99999,99998,99997,99996 nodes is "
                                         r"3\.33e\+24 sequences, above 1000000000"):
        planner.plan(config, cluster, nodes=100_000, candidates=[99_999, 99_998, 99_997, 99_996])


def run(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_json_with_explicit_dimensions(capsys):
    code, out, _ = run(["plan", "--layers", "2", "--hidden", "64", "--ffn", "128", "--heads", "4", "--vocab", "100",
                        "--nodes", "3", "--scale-in", "0.34", "--gpus-per-node", "2", "--hbm-gib", "4",
                        "--seq-len", "16", "--json"], capsys)
    assert code == 0
    result = json.loads(out)
    assert result["model"]["total_params"] == TINY_PARAMS
    assert result["counts"] == [3, 2]  # 3 x (1 - 0.34) = 1.98 -> 2
    assert [c["dp"] for c in result["candidates"]] == [6, 4]
    assert (result["target_global_batch"], result["global_batch"]) == (6, 12)  # lcm(6, 4)


def test_cli_global_tokens_round_up_to_whole_sequences(capsys):
    code, out, _ = run(["plan", "--model", "llama3-8b", "--nodes", "2", "--candidates", "1", "--global-tokens",
                        "1000000", "--json"], capsys)
    assert code == 0
    result = json.loads(out)
    # 1,000,000 / 8192 = 122.07 -> 123 sequences; lcm(16, 8) = 16 -> 128 sequences = 1,048,576 tokens
    assert (result["target_global_batch"], result["global_batch"], result["global_tokens"]) == (123, 128, 1_048_576)


def test_cli_plot_writes_a_png(tmp_path, capsys):
    png = tmp_path / "plan.png"
    code, _, _ = run(["plan", "--model", "llama3-70b", "--nodes", "6", "--scale-in", "0.5", "--gpus-per-node", "4",
                      "--plot", str(png)], capsys)
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_cli_table_and_preset_override(capsys):
    code, out, _ = run(["plan", "--model", "llama3-8b", "--layers", "4", "--nodes", "2"], capsys)
    assert code == 0
    # 2 x 128256 x 4096 (embedding, head) + 4 x 218,112,000 (layers) + 4096 = 1,923,125,248
    assert out.startswith("llama3-8b(custom): 1.9B parameters") and "Global batch: 16 sequences" in out


ISSUE_COMMAND = ["plan", "--model", "llama3-8b", "--nodes", "16", "--global-batch", "128", "--candidates", "16,12,8"]


@pytest.mark.parametrize("argv, exit_code", [
    (ISSUE_COMMAND, 1),  # the batch misses its target
    (["plan", "--model", "llama4-scout", "--nodes", "64", "--scale-in", "0.25,0.5,0.75", "--cluster", "h200"], 0),
    (["plan", "--model", "llama3-70b", "--nodes", "100000", "--tp", "8", "--pp", "4", "--global-batch",
      "999900000"], 0),
], ids=["issue", "moe", "largest"])
def test_the_table_and_every_paragraph_fit_80_columns(argv, exit_code, capsys):
    code, out, _ = run(argv, capsys)
    assert code == exit_code
    assert max(len(line) for line in out.splitlines()) <= 80, out


def test_the_issue_example_reads_without_contradiction(capsys):
    _, out, _ = run(ISSUE_COMMAND, capsys)
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split() == ["nodes", "GPUs", "DP", "memory", "spill", "host", "accum", "step", "tok/s", "eff"]
    assert [row.split()[:6] for row in table[1:]] == [["16", "128", "128", "fits", "in", "HBM"],
                                                     ["12", "96", "96", "fits", "in", "HBM"],
                                                     ["8", "64", "64", "fits", "in", "HBM"]]
    text = " ".join(out.split())
    assert "Global batch: 384 sequences (3,145,728 tokens of 8192) on 16 -> 12 -> 8 nodes" in text
    assert ("+200.0%. That misses the target by more than 25% (exit code 1). This set keeps a target of 384 "
            "sequences exactly (--global-batch). Nearest candidate sets within 25%:") in text
    assert re.search(r"--candidates 16,8: global batch 128 \(\+0.0%\)", text)
    assert "Memory: runs with TRANSIT on 1 node or more (what HBM cannot hold fits in host DRAM); fits in HBM alone, " \
           "with a 10% margin, on 1 node or more." in text


def test_wide_adds_columns_and_json_carries_every_figure(capsys):
    _, wide, _ = run([*ISSUE_COMMAND, "--wide"], capsys)
    assert wide.split("\n\n")[1].splitlines()[0].split()[-8:] == ["states", "activ", "need", "gathered", "framework",
                                                                   "compute_s", "pcie_s", "global"]
    _, out, _ = run([*ISSUE_COMMAND, "--json"], capsys)
    result = json.loads(out)
    for key in ("counts", "target_global_batch", "global_batch", "global_tokens", "batch_lcm", "overshoot",
                "within_overshoot", "proposals", "min_runnable_nodes", "min_native_nodes"):
        assert key in result
    for key in ("nodes", "gpus", "dp", "verdict", "model_state_bytes", "activation_bytes", "spilled_bytes",
                "host_bytes_per_node", "grad_accum", "efficiency", "device_bytes_needed", "memory", "compute_s",
                "pcie_s", "step_s", "tokens_per_s_per_gpu", "global_batch"):
        assert key in result["candidates"][0]


def test_cli_without_model_names_missing_dimensions(capsys):
    code, _, err = run(["plan", "--layers", "2", "--hidden", "64", "--nodes", "1"], capsys)
    assert code == 2 and "model dimensions missing: --ffn, --heads, --vocab" in err


@pytest.mark.parametrize("lcm, target, expected", [
    (384, 128, [384]),  # below one multiple: only the one above
    (384, 1000, [768, 1152]),
    (96, 960, [960]),  # a multiple itself
])
def test_workable_targets_are_the_multiples_around_the_target(lcm, target, expected):
    assert planner.workable_targets(lcm, target) == expected


def test_a_target_below_one_micro_step_says_fewer_counts_cannot_help(capsys):
    # 16 nodes of 8 GPUs train 128 sequences a micro-step at local batch 1: 2 is out of reach of any set
    code, out, _ = run(["plan", "--model", "llama3-8b", "--nodes", "16", "--global-batch", "2", "--candidates", "8",
                        "--json"], capsys)
    result = json.loads(out)
    assert code == 1 and (result["within_overshoot"], result["proposals"]) == (False, [])
    assert result["advice"] == ("Fewer counts cannot help: the requested count alone trains 128 sequences a "
                                "micro-step; raise the target to 128 or lower --nodes.")


def test_a_batch_within_the_tolerance_exits_zero_and_no_target_never_misses(capsys):
    code, _, _ = run(["plan", "--model", "llama3-8b", "--nodes", "16", "--global-batch", "1024", "--candidates",
                      "12,8"], capsys)
    assert code == 0  # 1,152 is +12.5%
    code, out, _ = run(["plan", "--model", "llama3-8b", "--nodes", "16", "--candidates", "12,8", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and (result["target_given"], result["global_batch"], result["advice"]) == (False, 384, None)


def test_an_uncalibrated_policy_plans_without_step_times_and_an_unknown_one_is_refused(capsys):
    code, out, _ = run(["plan", "--model", "llama3-8b", "--nodes", "2", "--policy", "hybrid"], capsys)
    assert code == 0 and out.split("\n\n")[1].splitlines()[1].split()[-3:] == ["-", "-", "-"]
    assert "no committed GPU summary calibrates --policy hybrid" in " ".join(out.split())
    code, _, err = run(["plan", "--model", "llama3-8b", "--nodes", "2", "--policy", "fast"], capsys)
    assert code == 2 and err == "transit plan: --policy 'fast' is not a policy; use base, prefetch, advise, hybrid\n"
