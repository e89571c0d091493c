#!/usr/bin/env bash
# Records the warm-up profiles of the 1.9B `bench` model at cap CAP (default 27G: L = cap - 1.5 GiB,
# as bench/run_compare.sh gives TRANSIT) for each global batch in BATCHES (default "8 64"), one
# run per policy with TRANSIT_PROFILE=1, on one GPU (BENCH_GPU, default 0). Base and prefetch run
# side by side (their bytes come from their own CUPTI records); advise runs alone, with NVML's
# PCIe counters sampled (bench/pcie_sampler.py), since its zero-copy bytes are measured only on
# the device as a whole. Device command (nvidia-h200, carry .whl and transit/lib):
#   source bench/device_setup.sh transit && BATCHES=8 bash bench/record_profiles.sh
# Writes $OUT/profiles-gbB.tar.gz: each run's stats, profile, train.py result, log, PCIe samples.
set -uo pipefail
cd "$(dirname "$0")/.."
CAP=${CAP:-27G}
BATCHES=${BATCHES:-"8 64"}
GPU=${BENCH_GPU:-0}
RUN_LIMIT_S=${RUN_LIMIT_S:-280}
WORK=${WORK:-/tmp/record-profiles}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
LIMIT=$(python3 -c "import sys; sys.path.insert(0, 'bench'); import common as c
print(c.parse_size(sys.argv[1]) - c.NON_ALLOCATOR_MARGIN_BYTES)" "$CAP") || exit 1
export TRANSIT_PROFILE=1 CUDA_VISIBLE_DEVICES=$GPU

# run POLICY BATCH STEPS: one TRANSIT run of train.py, its files under $WORK/gbBATCH-POLICY*.
run() {
    local policy=$1 batch=$2 steps=$3 name=gb$2-$1
    echo "$(date +%T) start $name (L=$LIMIT)"
    timeout "$RUN_LIMIT_S" python3 -m transit run --policy "$policy" --mem-limit "$LIMIT" --out "$WORK/$name.transit" \
        -- python3 -m torch.distributed.run --standalone --nproc-per-node 1 bench/train.py --model bench \
        --global-batch "$batch" --local-batch 4 --steps "$steps" --warmup 4 --label "$name" \
        --out "$WORK/$name.json" >"$WORK/$name.log" 2>&1
    echo "$(date +%T) end $name rc=$?"
}

# sampled NAME CMD...: CMD with the PCIe counters sampled into $WORK/NAME.pcie.csv.
sampled() {
    local name=$1
    shift
    python3 bench/pcie_sampler.py --gpu "$GPU" --out "$WORK/$name.pcie.csv" &
    local sampler=$!
    "$@"
    kill "$sampler"
    wait "$sampler"
}

for batch in $BATCHES; do
    steps=$([ "$batch" -ge 64 ] && echo 7 || echo 8)
    sampled "gb$batch-pair" eval 'run base "$batch" "$steps" & run prefetch "$batch" "$steps" & wait'
    sampled "gb$batch-advise" run advise "$batch" "$steps"
    tar -C "$WORK" -czf "$OUT/profiles-gb$batch.tar.gz" $(cd "$WORK" && ls -d "gb$batch-"*)
done
