#!/usr/bin/env bash
# Issue 55's device commands (docs/design-notes.md, "Hybrid at micro-batch 8"): the stages named,
# in order, within one device command of DEADLINE_S seconds (default 570 of the machine's 600,
# counted from this script's start, bench/device_setup.sh included).
#   e1   python -m bench run hybrid-cause-e1   (hybrid at L = 25.5 GiB, guard off, and native; gb 8 x mb 8)
#   e2a  python -m bench run hybrid-cause-e2a  (advise at L = 25.5 GiB)
#   e2b  python -m bench run hybrid-cause-e2b  (hybrid at L = 28.5 GiB: only the moments on the host)
#   e3   bench/uvm_speed_probe.py              (24 GiB of managed memory, no TRANSIT)
#   any other name: that bench experiment (e.g. hybrid-guard-gb8-mb8)
# Device command (carry [".whl"]):
#   BENCH_GIT_COMMIT=<sha> bash bench/hybrid_cause.sh e1 e2a
# Each bench stage runs with --time-limit = the seconds left: its runs start while a minute is left
# and are stopped at the deadline, its summary written either way ($OUT/NAME.json, NAME-raw.tar.gz);
# a stage with less than MIN_STAGE_S left is skipped, said in one line. Every run also leaves its
# steps as they ended (result.steps.jsonl in the raw archive).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the directory for the results}"
[ $# -gt 0 ] || { echo "hybrid_cause.sh: name the stages (e1 e2a e2b e3 or experiments)"; exit 2; }
source bench/device_setup.sh transit || { echo "hybrid_cause.sh: no libtransit: every stage but e3 needs it"; exit 1; }
DEADLINE_S=${DEADLINE_S:-570}
MIN_STAGE_S=${MIN_STAGE_S:-90}
nvidia-smi -L | grep -q '^GPU ' || { echo "hybrid_cause.sh: nvidia-smi lists no GPU"; exit 1; }
# every stage's name checked before the first runs
for stage in "$@"; do
    case $stage in e1|e2a|e2b|e3) ;; *) python3 -m bench plan "$stage" >/dev/null || exit 2 ;; esac
done
rc=0
for stage in "$@"; do
    left=$((DEADLINE_S - SECONDS))
    if [ "$left" -lt "$MIN_STAGE_S" ]; then
        echo "hybrid_cause.sh: $stage skipped: $left s left"
        rc=1
        continue
    fi
    echo "hybrid_cause.sh: $stage with $left s left"
    case $stage in
        e1) name=hybrid-cause-e1 ;;
        e2a) name=hybrid-cause-e2a ;;
        e2b) name=hybrid-cause-e2b ;;
        e3) name= ;;
        *) name=$stage ;;
    esac
    if [ -z "$name" ]; then
        timeout $((left - 5)) python3 bench/uvm_speed_probe.py --out "$OUT/uvm-speed-probe.json" || rc=1
    else
        python3 -m bench run "$name" --time-limit "$left" --out "$OUT" || rc=1
    fi
done
echo "hybrid_cause.sh: done after $SECONDS s"
exit $rc
