/* profile.h - the warm-up profile as data (TRANSIT_PROFILE=1).
 *
 * While the first profiling window is open (recorder.h), the profile collects, per launch of a
 * profiled iteration, the kernel's name, its GPU time, and the managed addresses its arguments
 * hold (the parameter buffer read word by word at launch: a pointer into a managed allocation is
 * a place the kernel reads or writes); and the unified memory records (HtoD, DtoH, GPU faults,
 * remote maps). At the window's end it aggregates them into phases and 2 MiB chunks
 * (profile_build.c) and writes rank<R>.<host>.<pid>.profile.json.gz beside the stats file
 * (schema transit.profile/1, docs/profile.md). `transit replay` runs the policies' decisions on
 * it. Memory is bounded by the PROFILE_MAX_* caps; what does not fit is counted as dropped. */
#ifndef TRANSIT_PROFILE_H
#define TRANSIT_PROFILE_H

#include "internal.h"

#include <stdbool.h>
#include <stdint.h>

/* What the collector keeps (bounded: at most the caps below, then counted as dropped). */
#define PROFILE_MAX_LAUNCHES (1u << 21)
#define PROFILE_MAX_REFS (1u << 22)
#define PROFILE_MAX_EVENTS (1u << 21)
#define PROFILE_MAX_NAMES (1u << 15)
/* What the file holds: per profiled iteration at most PROFILE_MAX_PHASES phases, and the
 * per-ordinal name and time arrays; the chunk table has one row per 2 MiB chunk touched. */
#define PROFILE_MAX_PHASES 4096u

typedef enum { PROFILE_HTOD, PROFILE_DTOH, PROFILE_FAULT, PROFILE_REMOTE } profile_event_kind;

typedef struct profile_launch {
    uint64_t start_ns, end_ns; /* GPU time from the kernel record; 0 when none came */
    uint32_t iteration, ordinal, name;
} profile_launch;

typedef struct profile_ref {
    uint64_t addr;   /* a word of the launch's parameters that points into managed memory */
    uint32_t launch; /* index into the launches */
} profile_ref;

typedef struct profile_event {
    uint64_t start_ns, addr, bytes; /* bytes: a fault counts its fault groups, a remote map its bytes */
    uint32_t kind;                  /* profile_event_kind */
    uint32_t chunks;                /* 2 MiB chunks it spans from addr's (1 for a fault; records merged) */
} profile_event;

typedef struct profile_alloc {
    uint64_t addr, bytes;
} profile_alloc;

/* Everything the builder reads: allocations sorted by address, disjoint. */
typedef struct profile_input {
    const profile_launch *launches;
    const profile_ref *refs;
    const profile_event *events;
    const profile_alloc *allocs;
    const char *const *names;
    uint64_t nlaunches, nrefs, nevents, nallocs, nnames;
    uint64_t first_iteration; /* the window's first iteration */
    uint32_t iterations;      /* how many it profiled */
    uint64_t dropped_launches, dropped_refs, dropped_events;
    uint64_t unread_launches; /* launches whose parameter sizes the driver did not give */
} profile_input;

/* The JSON fields the builder renders (no braces; the caller adds identity and config): a
 * malloc'd string, or NULL when out of memory. Pure: no CUDA, no global state (CPU-tested). */
TRANSIT_INTERNAL char *transit_profile_build(const profile_input *in);

/* ---- the collector (profile.c) ---- */

/* The recorder opens its first full profiling window of `iterations` from `first`. */
void transit_profile_window_begin(uint64_t first, uint32_t iterations);
/* True while the window collects for the profile: kernel times are then needed. */
bool transit_profile_collecting(void);
/* A managed allocation (the scan's bounds). */
void transit_profile_allocated(uint64_t ptr, uint64_t bytes);
/* A launch in the window, at API entry on the launching thread: corr and runtime_corr are the
 * correlation ids its kernel record may carry; params/extra as cuLaunchKernel takes them. */
void transit_profile_launch(uint64_t iteration, uint32_t ordinal, uint32_t corr, uint32_t runtime_corr,
                            const char *symbol, void *function, void **params, void **extra);
/* Activity records, from CUPTI's buffer thread. */
void transit_profile_kernel(uint32_t corr, uint64_t start_ns, uint64_t end_ns);
void transit_profile_event(profile_event_kind kind, uint64_t start_ns, uint64_t addr, uint64_t bytes);
/* The window ended and its records were flushed (complete), or the process exits first: builds
 * and writes the file, once. */
void transit_profile_window_end(bool complete);
void transit_profile_after_fork(void);

#endif
