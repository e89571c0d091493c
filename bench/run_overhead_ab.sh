#!/usr/bin/env bash
# Issue 3 item 6, A/B: the recorder's cost with this tree's libtransit against another build of it
# (OTHER_LIB, e.g. an older commit's, built on the development machine and carried), alternating on
# one GPU so that drifts of the machine hit both: this tree (native, base with and without the
# recorder), the other (base with and without), this tree again. Each round is run_overhead.sh's
# timings. (The recorder's cost alone: run_recorder_pairs.sh.) One device command (nvidia-h200):
#   OTHER_LIB=build/ab/libtransit.so bash bench/run_overhead_ab.sh   (results: $OUT/ab-<round>/overhead.json)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_setup.sh transit || exit 1
[ -n "${OTHER_LIB:-}" ] || { echo "run_overhead_ab.sh: OTHER_LIB must name the other build's libtransit.so"; exit 2; }
THIS_LIB=/tmp/libtransit-this.so
cp -p transit/lib/libtransit.so "$THIS_LIB"
# round NAME LIB SYSTEMS: run_overhead.sh with LIB in place (cp -p keeps its time stamp, so a
# later cmake --install still sees this tree's build as up to date; an unchanged library is not
# copied: cp rewrites it in place, under any other job that has it mapped).
round() {
    cmp -s "$2" transit/lib/libtransit.so || cp -p "$2" transit/lib/libtransit.so
    TRANSIT_PREBUILT=1 WORK=/tmp/ab-$1 OUT=$OUT/ab-$1 SYSTEMS=$3 DEADLINE_S=150 bash bench/run_overhead.sh
}
round this1 "$THIS_LIB" "native transit-base transit-base-norec"
round other1 "$OTHER_LIB" "transit-base transit-base-norec"
round this2 "$THIS_LIB" "transit-base transit-base-norec"
cmp -s "$THIS_LIB" transit/lib/libtransit.so || cp -p "$THIS_LIB" transit/lib/libtransit.so
