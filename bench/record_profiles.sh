#!/usr/bin/env bash
# Records the warm-up profiles of the 1.9B `bench` model at cap CAP (default 27G: L = cap - 1.5 GiB,
# as the protocol gives TRANSIT) for each global batch in BATCHES (default "8 64"), one
# run per policy with TRANSIT_PROFILE=1, STEPS optimizer steps each (default 6: two profiled, one
# to drain, the first planned one, two after), on one GPU (BENCH_GPU, default 0). Base and
# prefetch run side by side (their bytes come from their own CUPTI records); advise runs alone,
# with NVML's PCIe counters sampled (bench/pcie_sampler.py), since its zero-copy bytes are
# measured only on the device as a whole. Device command (nvidia-h200, carry .whl and transit/lib):
#   source bench/device_setup.sh transit && BATCHES=8 bash bench/record_profiles.sh
# Writes, as each part ends, $OUT/gbB-pair.tar.gz and $OUT/gbB-advise.tar.gz: each run's stats,
# profile, train.py result and log, and the PCIe samples.
set -uo pipefail
cd "$(dirname "$0")/.."
CAP=${CAP:-27G}
BATCHES=${BATCHES:-"8 64"}
STEPS=${STEPS:-6}
GPU=${BENCH_GPU:-0}
RUN_LIMIT_S=${RUN_LIMIT_S:-280}
WORK=${WORK:-/tmp/record-profiles}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
LIMIT=$(python3 -c "import sys; sys.path.insert(0, 'bench'); import common as c
print(c.parse_size(sys.argv[1]) - c.NON_ALLOCATOR_MARGIN_BYTES)" "$CAP") || exit 1
export TRANSIT_PROFILE=1 CUDA_VISIBLE_DEVICES=$GPU

# run POLICY BATCH: one TRANSIT run of train.py, its files under $WORK/gbBATCH-POLICY*.
run() {
    local policy=$1 batch=$2 name=gb$2-$1 rc
    echo "$(date +%T) start $name (L=$LIMIT)"
    timeout "$RUN_LIMIT_S" python3 -m transit run --policy "$policy" --mem-limit "$LIMIT" --out "$WORK/$name.transit" \
        -- python3 -m torch.distributed.run --standalone --nproc-per-node 1 bench/train.py --model bench \
        --global-batch "$batch" --local-batch 4 --steps "$STEPS" --warmup 4 --label "$name" \
        --out "$WORK/$name.json" >"$WORK/$name.log" 2>&1
    rc=$?
    echo "$(date +%T) end $name rc=$rc"
}

# part NAME BATCH POLICY...: the policies' runs side by side with the PCIe counters sampled into
# $WORK/NAME.pcie.csv, then their files into $OUT/NAME.tar.gz.
part() {
    local name=$1 batch=$2 policy runs=()
    shift 2
    python3 bench/pcie_sampler.py --gpu "$GPU" --out "$WORK/$name.pcie.csv" &
    local sampler=$!
    for policy in "$@"; do
        run "$policy" "$batch" &
        runs+=($!)
    done
    wait "${runs[@]}"
    kill "$sampler"
    wait "$sampler"
    (cd "$WORK" && tar -czf "$OUT/$name.tar.gz" "$name.pcie.csv" $(for p in "$@"; do ls -d "gb$batch-$p".*; done))
}

for batch in $BATCHES; do
    part "gb$batch-pair" "$batch" base prefetch
    part "gb$batch-advise" "$batch" advise
done
