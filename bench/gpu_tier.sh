#!/usr/bin/env bash
# The GPU test tier in one device command, with everything needed to read its failures afterwards:
# the whole pytest log, its JUnit XML, and every stats file, tick log, profile and stderr the tests
# left, in one archive (a device command brings back at most 8 files).
#   TESTS="tests/gpu" TIMEOUT_S=480 bash bench/gpu_tier.sh
#   (results: $OUT/gpu-tests.log, $OUT/gpu-tests.xml, $OUT/gpu-tests-files.tgz)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_setup.sh transit || exit 1
: "${OUT:?set OUT to the directory for the results}"
TESTS=${TESTS:-tests/gpu}
TIMEOUT_S=${TIMEOUT_S:-480}
BASETEMP=/tmp/pt
rm -rf "$BASETEMP"
# shellcheck disable=SC2086  # TESTS is a list of paths
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} timeout "$TIMEOUT_S" python3 -m pytest -m gpu $TESTS -q -rA \
    -p no:cacheprovider --basetemp="$BASETEMP" --junitxml="$OUT/gpu-tests.xml" >"$OUT/gpu-tests.log" 2>&1
rc=$?
tail -25 "$OUT/gpu-tests.log"
[ "$rc" = 124 ] && echo "gpu_tier: stopped at ${TIMEOUT_S}s; the log shows where"
find "$BASETEMP" 2>/dev/null \( -name '*.json' -o -name '*.json.gz' -o -name '*.ticks.csv' -o -name stderr.log \) -print0 |
    tar czf "$OUT/gpu-tests-files.tgz" --null -T - 2>/dev/null
exit "$rc"
