#!/usr/bin/env bash
# The product's main path on one GPU host through real Slurm, as one device command from a bare
# machine: Debian 12's Slurm and munge unpacked from the carried .debs/ under /tmp (never into /),
# the dev cluster started from there without accounting (scripts/dev-cluster), the quickstart's
# 2-node `#SBATCH --transit=advise` job (scripts/quickstart), the GPU test that runs the same
# model through `srun -N2` natively, under advise and under hybrid (tests/gpu/test_slurm_main_path.py),
# and `transit report` of the quickstart's job.
#
#   here:    scripts/fetch-slurm-debs                      (fills .debs/, about 4.3 MB)
#   device:  bash bench/slurm_e2e.sh                       (carry [".debs", ".whl"])
#
# Results in $OUT: quickstart.log (the quickstart's output, its report included), job.out (the
# job's own output), report.txt and report.json (`transit report JOBID`, `--json`), job-stats.tgz
# (the job's report directory: the ranks' stats and the plugin's step files), gpu-test.log, and
# cluster-logs.tgz (the daemons' logs and every job's output). DEADLINE_S (default 530) bounds
# the whole command; a phase that would pass it is stopped.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
source bench/device_setup.sh transit || exit 1
: "${OUT:?set OUT to the directory for the results}"
DEADLINE_S=${DEADLINE_S:-530}
PREFIX=/tmp/slurm-prefix

say() { echo "slurm_e2e: $*"; }
left() { echo $((DEADLINE_S - SECONDS)); }

nvidia-smi -L | grep -q '^GPU ' || { say "nvidia-smi lists no GPU: this command is for a GPU host"; exit 1; }
compgen -G ".debs/*.deb" >/dev/null || { say "no .debs/*.deb: run scripts/fetch-slurm-debs and carry .debs"; exit 1; }

# Slurm and munge under $PREFIX; the test user runs its commands, so all may read it. A tree
# copied under umask 077, or wheels installed under it, would keep that user out too.
rm -rf "$PREFIX" && mkdir -m 0755 "$PREFIX"
for deb in .debs/*.deb; do dpkg-deb -x "$deb" "$PREFIX" || { say "dpkg-deb -x $deb failed"; exit 1; }; done
chmod -R go+rX "$REPO"
[[ -d /tmp/site ]] && chmod -R go+rX /tmp/site
multiarch=$(uname -m)-linux-gnu
libraries=$PREFIX/usr/lib/$multiarch:$PREFIX/usr/lib/$multiarch/slurm-wlm:$PREFIX/lib/$multiarch
missing=$(LD_LIBRARY_PATH=$libraries ldd "$PREFIX"/usr/sbin/* "$PREFIX"/usr/bin/* 2>/dev/null | grep 'not found' | sort -u)
[[ -z $missing ]] || say "libraries the unpacked binaries need and this host lacks:"$'\n'"$missing"
say "$(compgen -G '.debs/*.deb' | wc -l) packages unpacked into $PREFIX;" \
    "$(LD_LIBRARY_PATH=$libraries "$PREFIX/usr/sbin/slurmctld-wlm" -V)"

# The plugin is built against the unpacked slurm/spank.h, as device_setup.sh built libtransit.
{ cmake -S . -B build/device -DTRANSIT_SLURM_INCLUDE="$PREFIX/usr/include" && cmake --build build/device -j "$(nproc)" &&
    cmake --install build/device --prefix . && test -f transit/lib/spank_transit.so; } >/tmp/plugin-build.log 2>&1 ||
    { say "building the SPANK plugin failed:"; tail -30 /tmp/plugin-build.log; exit 1; }

export TRANSIT_DEV_CLUSTER_PREFIX=$PREFIX TRANSIT_DEV_CLUSTER_ACCOUNTING=0
DC=${TRANSIT_DEV_CLUSTER_DIR:-$REPO/.dev-cluster}
# `transit` for this checkout (no installed package here) in the jobs' batch scripts, run by this python.
PYTHON=$(command -v python3)
export PYTHON
export PATH=$REPO/tests/fixtures/plan/bin:$PATH

finish() {
    (cd "$DC" && shopt -s nullglob && tar czf "$OUT/cluster-logs.tgz" log quickstart/*.out work/*/*/log.txt)
    scripts/dev-cluster down
}
trap finish EXIT

say "the quickstart ($(left) s left)"
timeout $(($(left) < 300 ? $(left) : 300)) scripts/quickstart --no-setup >"$OUT/quickstart.log" 2>&1
rc=$?
cat "$OUT/quickstart.log"
if ! scripts/dev-cluster status >/dev/null 2>&1; then
    say "the dev cluster did not come up; the ends of its logs:"
    for f in "$DC"/log/*.log; do echo "== $f"; tail -15 "$f"; done
    exit 1
fi
eval "$(scripts/dev-cluster env)"
# The job's id, from the line the quickstart prints when its job ends, finished or failed.
jobid=$(sed -n 's/^quickstart: job \([0-9]*\) \(finished\|failed\).*/\1/p' "$OUT/quickstart.log")
if [[ -n $jobid ]]; then
    cp "$DC/quickstart/slurm-$jobid.out" "$OUT/job.out"
    python3 -m transit report "$jobid" >"$OUT/report.txt" 2>&1
    python3 -m transit report "$jobid" --json >"$OUT/report.json" 2>>"$OUT/report.txt"
    tar czf "$OUT/job-stats.tgz" -C "$DC/reports" "$jobid"
else
    say "the quickstart's job did not end (exit $rc)"
fi

say "the GPU test ($(left) s left)"
timeout $(($(left) > 60 ? $(left) - 20 : 40)) python3 -m pytest -m gpu tests/gpu/test_slurm_main_path.py -q -rA -p no:cacheprovider \
    >"$OUT/gpu-test.log" 2>&1
test_rc=$?
tail -25 "$OUT/gpu-test.log"
say "done in ${SECONDS}s: quickstart exit $rc, GPU test exit $test_rc"
[[ $rc == 0 && $test_rc == 0 ]]
