#!/usr/bin/env bash
# Issue 8: every system under the same cap L (MEM_LIMIT) at the same tokens per optimizer step
# (global batch GLOBAL_BATCH x 2048 tokens). One device command on the 2-GPU machine (nvidia-h200-x2):
#   bash bench/run_compare.sh         (results: $OUT/compare.json, $OUT/compare-logs.txt)
# SYSTEMS="fsdp2-2gpu transit-advise" runs only those (bench/lib.sh; default: all, in the order below).
# No offload on 2 GPUs; TRANSIT advise (then prefetch and base, if time is left) on 1 GPU; FSDP2
# CPUOffloadPolicy on 1 GPU with micro-batches of FRAMEWORK_LOCAL_BATCH and of 4; DeepSpeed
# ZeRO-Offload and ZeRO-Infinity on 1 GPU; 2 GPUs with NCCL on sockets over loopback (the
# emulated inter-node link) for the network sensitivity rho.
set -uo pipefail
cd "$(dirname "$0")/.."
DEADLINE_S=${DEADLINE_S:-510}
GLOBAL_BATCH=${GLOBAL_BATCH:-8}
# Per-run limits (seconds) for the runs whose steps grow with the global batch: each TRANSIT run
# (its 4 warm-up steps are the longest part, see TRANSIT_COMMON) and each FSDP2 CPU-offload run.
TRANSIT_RUN_LIMIT_S=${TRANSIT_RUN_LIMIT_S:-200}
OFFLOAD_LIMIT_S=${OFFLOAD_LIMIT_S:-110}
# The frameworks' micro-batch (FSDP2 offload and DeepSpeed). 8 is global batch 8 in one micro-batch;
# at global batch 64, ZeRO-Offload also fits the cap with 16, and is faster (bench/README.md).
FRAMEWORK_LOCAL_BATCH=${FRAMEWORK_LOCAL_BATCH:-8}
source bench/lib.sh
# The one-GPU runs take GPU BENCH_GPU (default 0), so that two drivers can share the 2-GPU machine:
# with one-GPU SYSTEMS only, since the 2-GPU runs take both GPUs.
if [ -n "${BENCH_GPU:-}" ] && { selected fsdp2-2gpu || selected fsdp2-2gpu-socket; }; then
    echo "run_compare.sh: BENCH_GPU=$BENCH_GPU with 2-GPU systems selected (fsdp2-2gpu, fsdp2-2gpu-socket):" \
        "they take both GPUs; set SYSTEMS to one-GPU systems only, or leave BENCH_GPU unset" >&2
    exit 2
fi
source bench/device_setup.sh || exit 1

# DeepSpeedCPUAdam is a JIT-built C++ op: build it now, in the background and niced, so that it is
# ready for the DeepSpeed runs; if it is not, they use PyTorch's fused AdamW on the CPU instead.
DS_BUILD_PID=
if selected zero-offload || selected zero-infinity; then
    nice -n 19 python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()" \
        >"$WORK/ds-cpu-adam-build.log" 2>&1 &
    DS_BUILD_PID=$!
fi

# TRANSIT's limit covers managed data only; the other systems keep NON_ALLOCATOR_MARGIN_BYTES of
# the cap for memory outside PyTorch's allocator (context, NCCL). TRANSIT gets the cap minus the same
# margin, so that its data plus that memory stays under the cap as theirs does.
TRANSIT_LIMIT=$(python3 -c "import sys; sys.path.insert(0, 'bench'); import common as c
print(c.parse_size(sys.argv[1]) - c.NON_ALLOCATOR_MARGIN_BYTES)" "$MEM_LIMIT") || exit 1
MODEL_BATCH=(--model "$MODEL" --global-batch "$GLOBAL_BATCH")
COMMON=("${MODEL_BATCH[@]}" --steps 6 --warmup 2)
# TRANSIT profiles TRANSIT_WARMUP_ITERS=2 iterations, drains the third, and advise applies during the
# fourth: 4 warm-up steps. In limit mode those take 7, 26, 42 and 28 s on this model; the steps after
# are 3.5 s (bench/results/policies-h200x2.json), hence advise's time budget.
TRANSIT_COMMON=("${MODEL_BATCH[@]}" --steps 8 --warmup 4 --residency-sweep)
ONE_GPU_ID=${BENCH_GPU:-0}
ONE_GPU=(env CUDA_VISIBLE_DEVICES="$ONE_GPU_ID" python3 -m torch.distributed.run --standalone --nproc-per-node 1)
TWO_GPUS=(python3 -m torch.distributed.run --standalone --nproc-per-node 2)
SOCKETS=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo)

# transit_bench NAME POLICY [VAR=VALUE...]: TRANSIT on one GPU at L, every policy with the same arguments.
transit_bench() {
    local name=$1 policy=$2
    shift 2
    bench_run "$name" "$TRANSIT_RUN_LIMIT_S" env "$@" CUDA_VISIBLE_DEVICES="$ONE_GPU_ID" \
        $TRANSIT run --policy "$policy" --mem-limit "$TRANSIT_LIMIT" --out "$WORK/$name.transit" -- \
        python3 -m torch.distributed.run --standalone --nproc-per-node 1 bench/train.py "${TRANSIT_COMMON[@]}" \
        --local-batch 4 --time-budget $((TRANSIT_RUN_LIMIT_S - 60)) --label "$name" --out "$WORK/$name.json"
}

bench_run fsdp2-2gpu 100 "${TWO_GPUS[@]}" bench/train.py "${COMMON[@]}" --local-batch 4 \
    --mem-cap "$MEM_LIMIT" --time-budget 25 --label fsdp2-2gpu --out "$WORK/fsdp2-2gpu.json"
transit_bench transit-advise advise
bench_run fsdp2-2gpu-socket 120 env "${SOCKETS[@]}" "${TWO_GPUS[@]}" bench/train.py "${COMMON[@]}" \
    --local-batch 4 --mem-cap "$MEM_LIMIT" --time-budget 30 --label fsdp2-2gpu-socket \
    --out "$WORK/fsdp2-2gpu-socket.json"
# FSDP2 offload reaches its step time after 1 warm-up step (its steps are the slowest, ~40 s at a
# global batch of 64).
OFFLOAD_STEPS=(--steps 4 --warmup 1)
bench_run fsdp-cpu-mb "$OFFLOAD_LIMIT_S" "${ONE_GPU[@]}" bench/train.py "${MODEL_BATCH[@]}" "${OFFLOAD_STEPS[@]}" --local-batch "$FRAMEWORK_LOCAL_BATCH" --offload fsdp-cpu \
    --mem-cap "$MEM_LIMIT" --time-budget 30 --label fsdp-cpu-mb --out "$WORK/fsdp-cpu-mb.json"

if [ -z "$DS_BUILD_PID" ] || kill -0 "$DS_BUILD_PID" 2>/dev/null || ! wait "$DS_BUILD_PID"; then
    CPU_ADAM=torch  # still building, or the build failed: see ds-cpu-adam-build.log
else
    CPU_ADAM=deepspeed
fi
echo "DeepSpeed CPU optimizer: $CPU_ADAM" | tee -a "$WORK/driver.log"
for system in zero-offload zero-infinity; do
    bench_run "$system" 150 "${ONE_GPU[@]}" bench/deepspeed_train.py --system "$system" "${COMMON[@]}" \
        --local-batch "$FRAMEWORK_LOCAL_BATCH" --cpu-adam "$CPU_ADAM" --mem-cap "$MEM_LIMIT" --time-budget 35 \
        --out "$WORK/$system.json"
done
# FSDP2 offload with (more) gradient accumulation: many times slower per token (DESIGN.md).
bench_run fsdp-cpu-accum "$OFFLOAD_LIMIT_S" "${ONE_GPU[@]}" bench/train.py "${MODEL_BATCH[@]}" "${OFFLOAD_STEPS[@]}" \
    --local-batch 4 --offload fsdp-cpu --mem-cap "$MEM_LIMIT" --time-budget 30 \
    --label fsdp-cpu-accum --out "$WORK/fsdp-cpu-accum.json"

# With what time is left: the other policies, and TRANSIT's own rho (1 GPU: no NCCL traffic).
for policy in prefetch base; do
    transit_bench "transit-$policy" "$policy"
done
transit_bench transit-advise-socket advise "${SOCKETS[@]}"
finish compare
