#!/usr/bin/env bash
# Issue 2 item 9 and issue 3 item 6: TRANSIT's cost on a workload that fits: native vs
# `transit run --policy base`, recorder on (its default: profiling in warm-up) vs off; then the
# GPU tests (pytest -m gpu tests/gpu) and the HF Trainer transparency pair. Every TRANSIT run on
# the device sets a limit (the guard against oversubscription); here it is far above the ~10 GiB
# footprint, so nothing is evicted and the runs behave as in physical mode.
# One device command (nvidia-h200; SYSTEMS="native transit-base transit-base-norec" for the timings only):
#   bash bench/run_overhead.sh        (results: $OUT/overhead.json, $OUT/overhead-logs.txt)
set -uo pipefail
cd "$(dirname "$0")/.."
DEADLINE_S=${DEADLINE_S:-500}
source bench/device_setup.sh transit || exit 1
source bench/lib.sh
# One GPU, also on the 2-GPU machine (the HF Trainer would otherwise spread over every visible GPU;
# BENCH_GPU picks it).
export CUDA_VISIBLE_DEVICES=${BENCH_GPU:-0}

# The recorder profiles for TRANSIT_WARMUP_ITERS iterations: 10 gives a warm-up window to time.
WARMUP_ITERS=10
ROOMY_LIMIT=64G
TRAIN=(python3 -m torch.distributed.run --standalone --nproc-per-node 1 bench/train.py --model small --global-batch 8
       --local-batch 8 --steps 60 --warmup "$WARMUP_ITERS")

bench_run native 120 "${TRAIN[@]}" --label native --out "$WORK/native.json"
bench_run transit-base 120 env TRANSIT_WARMUP_ITERS=$WARMUP_ITERS \
    $TRANSIT run --policy base --mem-limit $ROOMY_LIMIT --out "$WORK/transit-base.transit" -- \
    "${TRAIN[@]}" --label transit-base --out "$WORK/transit-base.json"
bench_run transit-base-norec 120 env TRANSIT_WARMUP_ITERS=$WARMUP_ITERS TRANSIT_RECORDER=0 \
    $TRANSIT run --policy base --mem-limit $ROOMY_LIMIT --out "$WORK/transit-base-norec.transit" -- \
    "${TRAIN[@]}" --label transit-base-norec --out "$WORK/transit-base-norec.json"

bench_run gpu-tests 240 python3 -m pytest -m gpu tests/gpu -q -rA -p no:cacheprovider \
    --junitxml "$WORK/pytest-gpu.xml"

# Transparency: the unmodified HF Trainer, native and under TRANSIT (advise, ~2x oversubscribed).
bench_run hf-native 120 python3 bench/hf_trainer.py --label hf-native --out "$WORK/hf-native.json"
bench_run hf-transit 150 $TRANSIT run --policy advise --mem-limit 1G --out "$WORK/hf-transit.transit" -- \
    python3 bench/hf_trainer.py --label hf-transit --out "$WORK/hf-transit.json"
finish overhead
