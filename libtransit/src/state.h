/* state.h - process-wide state: configuration, identity, counters, activation.
 *
 * libtransit is inert until the process calls an interposed CUDA entry point: the
 * constructor only reads the environment; activation (config, signal handlers, exit hook)
 * happens on the first CUDA call, so bash or the torchrun agent see no effect at all. */
#ifndef TRANSIT_STATE_H
#define TRANSIT_STATE_H

#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define TRANSIT_MAX_DEVICES 64
#define TRANSIT_MAX_WARNINGS 8

typedef struct transit_identity {
    char job_id[32], step_id[32], node[256], hostname[256];
    int rank, local_rank, world_size; /* -1 when unknown */
    pid_t pid;
    int device;                       /* -1 until the first successful allocation */
    char gpu_uuid[48], gpu_name[128];
} transit_identity;

/* Monotonic counters, updated with atomics (read without locks by the stats writer). */
typedef struct transit_counters {
    uint64_t alloc_count, free_count;
    uint64_t managed_total, managed_live, managed_peak;
    uint64_t vmm_count, vmm_live;
    uint64_t refused, refused_calls, refused_bytes;
} transit_counters;

typedef struct transit_state {
    transit_config cfg;
    transit_identity id;
    transit_counters n;
    int active;             /* activation done */
    int cuda_active;        /* a real CUDA call succeeded */
    char cuda_error[96];    /* first error a real CUDA call returned, "" if none */
    double start_unix;
    uint64_t device_total[TRANSIT_MAX_DEVICES];  /* physical HBM, from the first query */
    uint64_t phys_budget[TRANSIT_MAX_DEVICES];   /* limit mode: most managed memory allowed */
    char warnings[TRANSIT_MAX_WARNINGS][192];
    int nwarnings;
} transit_state;

extern transit_state transit_g;

/* Idempotent; cheap after the first call. Exits the process on a bad TRANSIT_* value. */
void transit_activate(void);
static inline void transit_ensure_active(void)
{
    if (!__atomic_load_n(&transit_g.active, __ATOMIC_ACQUIRE))
        transit_activate();
}

static inline bool transit_limit_mode(void)
{
    return transit_g.cfg.mem_limit != 0;
}

/* Set while TRANSIT calls a real CUDA runtime function: the runtime may reach the driver
 * through TRANSIT's own driver hooks (cuGetProcAddress), which must then pass through. */
extern __thread int transit_in_real_call;

void transit_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void transit_note_cuda_ok(void);
void transit_note_cuda_error(const char *name);
/* Fills identity.gpu_* for `device` once (driver API only: safe inside any hook). */
void transit_note_device(int device);

static inline void transit_add(uint64_t *c, uint64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}
static inline void transit_sub(uint64_t *c, uint64_t v)
{
    __atomic_fetch_sub(c, v, __ATOMIC_RELAXED);
}
static inline uint64_t transit_get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}
void transit_raise_peak(uint64_t *peak, uint64_t value);
double transit_now(void);
uint64_t transit_monotonic_ns(void); /* for durations (never steps) */

#endif
