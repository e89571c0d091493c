#!/usr/bin/env bash
# Hybrid's steady iteration against an all-resident control (design-notes.md, "Hybrid at
# micro-batch 8"): the 1.9B `bench` model at global batch 64, micro-batch 8, one GPU, under hybrid
# with TRANSIT_PROFILE=1 and a steady profile, its guard off (hybrid's own placement throughout);
# first with L over the footprint (the control),
# then at L (default 27380416512, 25.5 GiB). Extra TRANSIT_* settings for the capped run go in
# CAPPED_ENV (e.g. CAPPED_ENV="TRANSIT_HYBRID_REMAP=1"). Device command (carry .whl):
#   source bench/device_setup.sh transit && bash bench/hybrid_steady.sh
# Writes $OUT/steady.tgz (each run's stats, profiles, train.py result and logs) and prints each
# run's step times and the two steady profiles compared (bench/steady_kernels.py).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the directory for the results}"
LIMIT=${LIMIT:-27380416512}
CAPPED_ENV=${CAPPED_ENV:-}
WORK=${WORK:-/tmp/steady}
DEADLINE_S=${DEADLINE_S:-545} # of a 600 s command: bench/device_setup.sh may take 30 s before it
T0=$SECONDS

# one NAME L STEPS STEADY_ITERATION WARMUP_STEPS RESERVE_S [VAR=VALUE ...]: a run that ends by
# DEADLINE_S less RESERVE_S (the time kept for the runs after it).
one() {
    local name=$1 limit=$2 steps=$3 steady=$4 warmup=$5 reserve=$6 dir=$WORK/$1
    shift 6
    rm -rf "$dir" && mkdir -p "$dir"
    env "$@" TRANSIT_PROFILE=1 TRANSIT_PROFILE_STEADY="$steady" TRANSIT_HYBRID_GUARD=0 \
        timeout $((DEADLINE_S - (SECONDS - T0) - reserve)) python3 -m transit run --policy hybrid --mem-limit "$limit" \
        --out "$dir" -- python3 -m torch.distributed.run --standalone --nproc-per-node 1 bench/train.py \
        --label "$name" --tp 1 --model bench --global-batch 64 --local-batch 8 --steps "$steps" --warmup "$warmup" \
        --out "$dir/result.json" >"$dir/stdout.log" 2>"$dir/stderr.log"
    echo "$name: rc $? after $((SECONDS - T0)) s"
    python3 -c "import json, sys; r = json.load(open(sys.argv[1])); t = r['step_time']
print('  steps', [round(s, 2) for s in t['all_s']], 'p50', round(t['p50_s'], 3),
      {k: round(v, 3) for k, v in r['step_phases_rank0']['p50_s'].items()})" "$dir/result.json" 2>/dev/null ||
        tail -3 "$dir/stderr.log"
    python3 -c "import json, sys; h = json.load(open(sys.argv[1]))['hybrid']
print('  placed on the device/host, GB:', round(h['placed_device_bytes'] / 1e9, 2), round(h['placed_host_bytes'] / 1e9, 2),
      'of them on the host at the last mark:', h['placed_device_on_host_bytes'], h['placed_host_on_host_bytes'],
      'readings', h['placement_readings'])" "$dir"/rank*[0-9].json 2>/dev/null || echo "  no hybrid stats"
}

# The control: 8 steps, iteration 6 profiled; the capped run: 13 steps (warm-up to step 4),
# iteration 9 profiled, steps 10-12 timed.
# shellcheck disable=SC2086  # CAPPED_ENV is a list of VAR=VALUE words
# CONTROL=0 runs the capped one alone (no comparison), when the device time left is short.
[ "${CONTROL:-1}" = 0 ] || one control 60G 8 6 4 420
one capped "$LIMIT" 13 9 10 25 $CAPPED_ENV
[ "${CONTROL:-1}" = 0 ] || PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python3 bench/steady_kernels.py \
    "$WORK"/capped/*.steady.profile.json.gz "$WORK"/control/*.steady.profile.json.gz \
    --warm-up "$(ls "$WORK"/capped/*[0-9].profile.json.gz)" --top 10
tar czf "$OUT/steady.tgz" -C "$(dirname "$WORK")" "$(basename "$WORK")"
