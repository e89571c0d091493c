#!/usr/bin/env bash
# Issue 3 item 5: TRANSIT base / prefetch / advise on 1 GPU in limit mode (L = MEM_LIMIT, footprint
# ~1.4x L), against a native run for the reference losses. One device command (nvidia-h200):
#   bash bench/run_policies.sh        (results: $OUT/policies.json, $OUT/policies-logs.txt)
# POLICIES (default "advise prefetch base"), POLICY_STEPS (8), POLICY_LIMIT_S (200) and POLICY_BUDGET_S
# (90, the training time after which a run stops) let one command re-measure a policy the deadline cut
# or run one longer.
# On nvidia-h200-x2, POLICY_GPUS=2 runs the policies two at a time, one per GPU (each run still
# has one GPU to itself: its PCIe link, its copy engines), so every policy gets twice the steps.
# Deterministic kernels everywhere, so TRANSIT's losses can be compared bit for bit.
set -uo pipefail
cd "$(dirname "$0")/.."
DEADLINE_S=${DEADLINE_S:-500}
source bench/device_setup.sh transit || exit 1
source bench/lib.sh
# One GPU per run, also on the 2-GPU machine (BENCH_GPU picks it).
export CUDA_VISIBLE_DEVICES=${BENCH_GPU:-0}

# Global batch 8 = local batch 4 x 2 micro-batches on 1 GPU (what 2 GPUs train with local batch 4).
# 4 warm-up steps: libtransit profiles 2 iterations and drains a third, and advise applies during
# the fourth (at 6b5fec1 the runner's 3 put that 28 s step into advise's mean).
TRAIN=(python3 -m torch.distributed.run --standalone --nproc-per-node 1 bench/train.py --model "$MODEL" --global-batch 8
       --local-batch 4 --deterministic --steps "${POLICY_STEPS:-8}" --warmup 4 --residency-sweep)

# What NVML's device reading does with evicted managed pages (bench/README.md explains why it matters).
mkdir -p "${OUT:?OUT must name the output directory}"
timeout 60 python3 bench/uvm_probe.py --gib 8 --out "$OUT/uvm-probe.json" 2>&1 | tee "$OUT/uvm-probe.txt"
bench_run native 120 "${TRAIN[@]}" --label native --time-budget 40 --out "$WORK/native.json"
run_policy() {
    local policy=$1
    bench_run "transit-$policy" "${POLICY_LIMIT_S:-200}" \
        $TRANSIT run --policy "$policy" --mem-limit "$MEM_LIMIT" --out "$WORK/transit-$policy.transit" -- \
        "${TRAIN[@]}" --label "transit-$policy" --time-budget "${POLICY_BUDGET_S:-90}" --out "$WORK/transit-$policy.json"
}
# Fastest first, so that the slowest (base) gets what is left of the deadline; with two GPUs,
# every other policy goes to the second one.
read -r -a policies <<<"${POLICIES:-advise prefetch base}"
if [ "${POLICY_GPUS:-1}" = 2 ]; then
    for gpu in 0 1; do
        (export CUDA_VISIBLE_DEVICES=$gpu
         for ((i = gpu; i < ${#policies[@]}; i += 2)); do run_policy "${policies[i]}"; done) &
    done
    wait
else
    for policy in "${policies[@]}"; do run_policy "$policy"; done
fi
finish policies
