/* state.h - process-wide state: configuration, identity, allocation counters (activation, which
 * fills them, is lifecycle.c's). */
#ifndef TRANSIT_STATE_H
#define TRANSIT_STATE_H

#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "json.h"

#define TRANSIT_MAX_DEVICES 64

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
} transit_state;

extern transit_state transit_g;

static inline bool transit_limit_mode(void)
{
    return transit_g.cfg.mem_limit != 0;
}

/* Set while TRANSIT calls a real CUDA runtime function: the runtime may reach the driver
 * through TRANSIT's own driver hooks (cuGetProcAddress), which must then pass through. */
extern __thread int transit_in_real_call;

void transit_note_cuda_ok(void);
void transit_note_cuda_error(const char *name);
/* Fills identity.gpu_* for `device` once (driver API only: safe inside any hook). */
void transit_note_device(int device);

/* The identity from the environment (Slurm's, torchrun's) and the clock, at activation. */
void transit_state_init(void);
/* A fork child: counters, budgets, the CUDA error and device noted, all forgotten. */
void transit_state_after_fork(void);
/* The device's memory; 0 before the first allocation found the device. */
uint64_t transit_device_bytes(void);
/* path gets $TRANSIT_OUT/rank<R>.<host>.<pid><suffix> (TRANSIT_OUT set), its directory created;
 * -1, logged, when that fails. */
int transit_out_path(char *path, size_t n, const char *suffix);
/* The mode of the files written there: the directory's mode without its execute bits. */
mode_t transit_out_file_mode(void);
/* The "identity" and "config" objects of the stats file (the profile carries them too), each
 * followed by ", ". */
void transit_state_identity_json(jbuf *b);
void transit_state_config_json(jbuf *b);

#endif
