#!/usr/bin/env bash
# The GPU test tier in one device command, with everything needed to read its failures afterwards:
# the whole pytest log, its JUnit XML, and every stats file, tick log, profile and stderr the tests
# left, in one archive (a device command brings back at most 8 files).
#   TESTS="tests/gpu" TIMEOUT_S=480 bash bench/gpu_tier.sh
#   (results: $OUT/gpu-tests.log, $OUT/gpu-tests.xml, $OUT/gpu-tests-files.tgz, and for a run
#   still going STACKS_S seconds before the limit, every thread's stack: $OUT/gpu-tests-stacks.txt)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_setup.sh transit || exit 1
: "${OUT:?set OUT to the directory for the results}"
TESTS=${TESTS:-tests/gpu}
TIMEOUT_S=${TIMEOUT_S:-480}
BASETEMP=/tmp/pt
rm -rf "$BASETEMP"
STACKS_S=${STACKS_S:-60} # kept at the end: a run still going then is a hang, and its stacks say where
STACKS_S=$((STACKS_S < TIMEOUT_S / 2 ? STACKS_S : TIMEOUT_S / 2))
# shellcheck disable=SC2086  # TESTS is a list of paths
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} python3 -m pytest -m gpu $TESTS -q -rA \
    -p no:cacheprovider --basetemp="$BASETEMP" --junitxml="$OUT/gpu-tests.xml" >"$OUT/gpu-tests.log" 2>&1 &
pytest_pid=$!
for ((t = 0; t < TIMEOUT_S - STACKS_S; t++)); do
    sleep 1
    kill -0 "$pytest_pid" 2>/dev/null || break
done
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
if kill -0 "$pytest_pid" 2>/dev/null; then
    # every thread's stack of the test's processes that use CUDA (cuda-gdb is the device's gdb),
    # within STACKS_S less the time their stats files take after the TERM
    procs=$(descendants "$pytest_pid")
    stacks_until=$((SECONDS + STACKS_S - 15))
    for p in $procs; do
        grep -q libcuda "/proc/$p/maps" 2>/dev/null && [ "$SECONDS" -lt "$stacks_until" ] || continue
        echo "=== $p: $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-300)"
        timeout -k 2 $((stacks_until - SECONDS)) cuda-gdb -p "$p" -batch -ex "info threads" -ex "thread apply all bt 30" 2>&1
    done >"$OUT/gpu-tests-stacks.txt"
    # shellcheck disable=SC2086  # procs is a list of pids
    kill -TERM $procs "$pytest_pid" 2>/dev/null
    for ((t = 0; t < 10; t++)); do
        kill -0 $procs "$pytest_pid" 2>/dev/null || break # their stats files are written on the TERM
        sleep 1
    done
    kill -KILL $procs "$pytest_pid" 2>/dev/null
    wait "$pytest_pid"
    rc=124
else
    wait "$pytest_pid"
    rc=$?
fi
tail -25 "$OUT/gpu-tests.log"
[ "$rc" = 124 ] && echo "gpu_tier: stopped at $((TIMEOUT_S - STACKS_S))s; the log shows where, gpu-tests-stacks.txt what hung"
find "$BASETEMP" 2>/dev/null \( -name '*.json' -o -name '*.json.gz' -o -name '*.ticks.csv' -o -name stderr.log \) -print0 |
    tar czf "$OUT/gpu-tests-files.tgz" --null -T - 2>/dev/null
exit "$rc"
