#!/usr/bin/env bash
# Issue 3 item 6: the recorder's cost, in PAIRS pairs of `transit run --policy $POLICY` (base
# unless set) on a workload that fits, recorder on (TRANSIT's default: it profiles during warm-up) and off
# (TRANSIT_RECORDER=0). Step times of one configuration drift between runs by more than the 5 %
# target (0.12-0.16 s a median step on an H200), so the two runs of a pair go side by side on a 2-GPU
# machine, sharing whatever the host does meanwhile (the GPUs swap each pair), or one after the
# other on one GPU (the order swaps each pair). collect.py's `recorder` kind compares each pair's
# two runs and gives the geometric mean ratio with its 95 % confidence interval, and the median
# ratio with the sign test's.
# One device command (nvidia-h200-x2, or nvidia-h200):
#   PAIRS=10 bash bench/run_recorder_pairs.sh      (results: $OUT/recorder.json, $OUT/gpu-clocks.csv)
set -uo pipefail
cd "$(dirname "$0")/.."
DEADLINE_S=${DEADLINE_S:-500}
source bench/device_setup.sh transit || exit 1
source bench/lib.sh

PAIRS=${PAIRS:-10}
POLICY=${POLICY:-base} # prefetch: its profile too (off, prefetch acts as base)
# The recorder profiles for TRANSIT_WARMUP_ITERS iterations: 20 gives a warm-up window to time
# (steps 1-19; step 0 allocates), and 30 steps after it.
WARMUP_ITERS=20
# Every TRANSIT run on the device sets a limit. The default is far above the workload's managed
# peak (12.1 GiB on an H200): no profile takes kernel times. LIMIT=20G puts that peak past L/2, where
# limit mode's profile (and prefetch's) traces kernels, and still under L - L/16: nothing is evicted.
LIMIT=${LIMIT:-64G}
# No memory monitor: its thread polls NVML every 20 ms and smaps every 0.2 s, taking the GIL from
# the timed loop. (Without it steps varied as much: 131-207 ms within one run at c98ffa8.)
TRAIN=(python3 -m torch.distributed.run --standalone --nproc-per-node 1 bench/train.py --model small --global-batch 8
       --local-batch 8 --steps 50 --warmup "$WARMUP_ITERS" --no-memory-monitor)

gpus=$(nvidia-smi -L 2>/dev/null | wc -l) cpus=$(nproc)
# one NAME GPU [TRANSIT_RECORDER value]: side by side, each run has half the CPUs, so that the
# scheduler never puts the two runs' threads on the same ones.
one() {
    local half=(); ((gpus >= 2)) && half=(taskset -c "$(($2 * cpus / 2))-$((($2 + 1) * cpus / 2 - 1))")
    bench_run "$1" 120 "${half[@]}" env CUDA_VISIBLE_DEVICES="$2" TRANSIT_WARMUP_ITERS=$WARMUP_ITERS \
        ${3:+TRANSIT_RECORDER=$3} $TRANSIT run --policy "$POLICY" --mem-limit "$LIMIT" --out "$WORK/$1.transit" -- \
        "${TRAIN[@]}" --label "$1" --out "$WORK/$1.json"
}

# Both GPUs' clocks, power, utilisation and clock-event reasons twice a second (read only), beside
# the SM clock and reasons train.py reads on its own GPU at each step's end: utilisation under
# 100 % at full clock points to the host. The field's newer name first (drivers 535+).
mkdir -p "${OUT:?OUT must name the output directory}"
for reasons in clocks_event_reasons.active clocks_throttle_reasons.active; do
    fields=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,$reasons
    nvidia-smi --query-gpu="$fields" --format=csv -c 1 >/dev/null 2>&1 && break
done
nvidia-smi --query-gpu="$fields" --format=csv -lms 500 >"$OUT/gpu-clocks.csv" 2>&1 &
clock_log=$!
trap 'kill $clock_log 2>/dev/null' EXIT

# The first minute after setup ran slower by fits (pairs 1-5 of run 9 against 6-17): one unpaired
# burn-in run per GPU first, left out of the pairs.
# (Each wait names its runs: a bare one would wait for the clock log too.)
burnins=()
for ((g = 0; g < (gpus >= 2 ? 2 : 1); g++)); do one "burnin-$g" "$g" 0 & burnins+=($!); done
wait "${burnins[@]}"
echo "recorder pairs: $PAIRS, policy $POLICY, limit $LIMIT, $( ((gpus >= 2)) && echo "side by side on GPUs 0 and 1" || echo "one after the other on GPU 0")"
for ((i = 1; i <= PAIRS; i++)); do
    if ((gpus >= 2)); then
        one "rec-$i" $((i % 2)) & rec=$!
        one "norec-$i" $(((i + 1) % 2)) 0 & norec=$!
        wait "$rec" "$norec"
    elif ((i % 2)); then
        one "rec-$i" 0; one "norec-$i" 0 0
    else
        one "norec-$i" 0 0; one "rec-$i" 0
    fi
done
finish recorder
