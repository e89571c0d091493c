/* recorder.c - the recorder's state, its queries and snapshot; see recorder.h.
 *
 * Threads that run code here read without locks: counters are atomics, the rest is read racily,
 * which at worst shows a value one update old. */
#include "attrib.h"
#include "recorder_int.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

recorder rec = {
    .win_lock = PTHREAD_MUTEX_INITIALIZER,
    .win_phase = WINDOW_DONE,
    .control_lock = PTHREAD_MUTEX_INITIALIZER,
    .period_lock = PTHREAD_MUTEX_INITIALIZER,
    .pool_lock = PTHREAD_MUTEX_INITIALIZER,
    .records_lock = PTHREAD_MUTEX_INITIALIZER,
};

int rec_get_state(void)
{
    return __atomic_load_n(&rec.state, __ATOMIC_ACQUIRE);
}

void rec_set_state(transit_recorder_state s, const char *why)
{
    snprintf(rec.reason, sizeof rec.reason, "%s", why ? why : "");
    __atomic_store_n(&rec.started, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&rec.state, (int)s, __ATOMIC_RELEASE);
}

void transit_recorder_set_sink(const transit_sink *sink)
{
    rec.sink = sink;
}

void transit_recorder_set_demand(uint32_t bits)
{
    __atomic_store_n(&rec.demand, bits, __ATOMIC_RELEASE);
}

/* ---- queries ---- */

int rec_in_window(uint64_t iteration)
{
    return __atomic_load_n(&rec.win_phase, __ATOMIC_RELAXED) != WINDOW_DONE &&
           iteration >= __atomic_load_n(&rec.win_begin, __ATOMIC_RELAXED) &&
           iteration < __atomic_load_n(&rec.win_end, __ATOMIC_RELAXED);
}

uint32_t rec_window_ordinal(uint64_t iteration, uint32_t ordinal)
{
    return rec_in_window(iteration) ? ordinal : TRANSIT_ATTRIB_NO_ORDINAL;
}

uint64_t transit_recorder_htod_bytes(void)
{
    return transit_get(&rec.n.htod_bytes);
}

uint64_t transit_recorder_dtoh_bytes(void)
{
    return transit_get(&rec.n.dtoh_bytes);
}

uint64_t transit_recorder_gpu_faults(void)
{
    return transit_get(&rec.n.gpu_faults);
}

transit_recorder_state transit_recorder_get_state(void)
{
    return (transit_recorder_state)rec_get_state();
}

bool transit_recorder_sees_launches(void)
{
    return rec_get_state() == TRANSIT_RECORDER_CUPTI && !__atomic_load_n(&rec.launches_off_at, __ATOMIC_ACQUIRE);
}

bool transit_recorder_sees_migrations(void)
{
    return rec_get_state() == TRANSIT_RECORDER_CUPTI && __atomic_load_n(&rec.um_ok, __ATOMIC_RELAXED) &&
           !__atomic_load_n(&rec.um_silent, __ATOMIC_ACQUIRE);
}

uint32_t transit_recorder_prev_iteration_launches(void)
{
    return __atomic_load_n(&rec.prev_launches, __ATOMIC_RELAXED);
}

uint64_t transit_recorder_profiled_iterations(void)
{
    return transit_get(&rec.n.profiled_iterations);
}

uint64_t transit_recorder_reprofiles(void)
{
    return transit_get(&rec.n.reprofiles);
}

void transit_recorder_snapshot(transit_recorder_snap *s)
{
    const transit_period *p = rec.period;
    bool window_open = __atomic_load_n(&rec.win_phase, __ATOMIC_RELAXED) != WINDOW_DONE;
    *s = (transit_recorder_snap){
        .state = (transit_recorder_state)rec_get_state(),
        .started = __atomic_load_n(&rec.started, __ATOMIC_ACQUIRE),
        .reason = rec.reason,
        .n = rec.n,
        .htod_hist = rec.htod_hist,
        .dtoh_hist = rec.dtoh_hist,
        .profiling = rec.have_profiling,
        .refining = __atomic_load_n(&rec.win_kind, __ATOMIC_RELAXED) == TRANSIT_WINDOW_REFINE && window_open,
        .unified_memory = rec.have_um,
        .detached = __atomic_load_n(&rec.detached, __ATOMIC_ACQUIRE),
        .um_silent = __atomic_load_n(&rec.um_silent, __ATOMIC_ACQUIRE),
        .external_ids = __atomic_load_n(&rec.want_external, __ATOMIC_RELAXED),
        .um_off_at = __atomic_load_n(&rec.um_off_at, __ATOMIC_ACQUIRE),
        .launches_off_at = __atomic_load_n(&rec.launches_off_at, __ATOMIC_ACQUIRE),
        .detached_at = __atomic_load_n(&rec.detached_at, __ATOMIC_ACQUIRE),
        .period_length = p ? transit_period_length(p) : 0,
        .period_iterations = p ? transit_period_iterations(p) : 0,
        .period_changes = p ? transit_period_changes(p) : 0,
    };
}
