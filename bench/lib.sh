# Shared by the driver scripts (sourced): one function that runs one benchmark under a hard time
# limit and leaves, in $WORK, NAME.cmd (the exact command), NAME.log, NAME.rc, NAME.json (the
# runner's result, when it got that far) and NAME.transit/ (TRANSIT stats, for TRANSIT runs).
# bench/collect.py turns a $WORK directory into one result file.

WORK=${WORK:-/tmp/bench-work}
rm -rf "$WORK" && mkdir -p "$WORK"

# Model and cap shared by all drivers: see bench/README.md ("Sizing").
MODEL=${MODEL:-bench}
MEM_LIMIT=${MEM_LIMIT:-24G}
TRANSIT="python3 -m transit"

# Seconds left before the driver's deadline (DEADLINE_S seconds after the script started).
seconds_left() {
    echo $((DEADLINE_S - SECONDS))
}

# selected NAME: whether SYSTEMS="name1 name2" names the run (no SYSTEMS: every run of the driver).
selected() {
    [[ -z "${SYSTEMS:-}" || " $SYSTEMS " == *" $1 "* ]]
}

# bench_run NAME LIMIT_S CMD ARGS...: run CMD with a hard limit (SIGTERM, then SIGKILL after 15 s:
# libtransit writes its stats file on SIGTERM). The limit is cut to what the deadline leaves.
# Runs only if selected.
bench_run() {
    local name=$1 limit=$2
    shift 2
    selected "$name" || return 0
    local left
    left=$(seconds_left)
    if ((left < 30)); then
        echo "=== $name: skipped, ${left}s left before the driver's deadline" | tee -a "$WORK/driver.log"
        echo "skipped: ${left}s left before the driver's deadline" >"$WORK/$name.skipped"
        return 0
    fi
    ((limit > left)) && limit=$left
    local cmd
    cmd=$(printf '%q ' "$@")
    echo "${cmd% }" >"$WORK/$name.cmd"
    echo "=== $name (limit ${limit}s): ${cmd% }" | tee -a "$WORK/driver.log"
    local t0=$SECONDS rc=0
    BENCH_COMMAND="${cmd% }" timeout -k 15 "$limit" "$@" >"$WORK/$name.log" 2>&1 || rc=$?
    echo "$rc" >"$WORK/$name.rc"
    echo "    $name: rc=$rc in $((SECONDS - t0))s" | tee -a "$WORK/driver.log"
    tail -n 2 "$WORK/$name.log" | sed 's/^/    | /'
    return 0
}

# finish KIND: combine $WORK into $OUT/KIND.json, print the table, keep the logs (one file).
finish() {
    local kind=$1
    mkdir -p "${OUT:?OUT must name the output directory}"
    python3 bench/collect.py "$kind" --work "$WORK" --out "$OUT/$kind.json"
    for f in "$WORK"/*.log; do
        [ -f "$f" ] && { echo "##### $(basename "$f")"; tail -n 200 "$f"; }
    done >"$OUT/$kind-logs.txt"
    echo "driver $kind done in ${SECONDS}s"
}
