/* profile_data.h - the warm-up profile's raw records and their aggregation (profile_build.c):
 * pure data, no CUDA (see profile.h for the collector, docs/profile.md for the file). */
#ifndef TRANSIT_PROFILE_DATA_H
#define TRANSIT_PROFILE_DATA_H

#include "internal.h"
#include "ranges.h"

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

/* The chunk table as numbers: every chunk touched or migrated (number = address / 2 MiB) and its
 * reuse; and the last profiled iteration's phases (hybrid's mover plans over them): each one's
 * first launch ordinal, kernel time (0 untimed) and touched chunks as 2 MiB aligned ranges.
 * Malloc'd (transit_profile_summary_free); n 0 when out of memory. */
typedef struct profile_summary {
    uint64_t *chunks;
    uint32_t *reuse;
    size_t n;
    uint32_t nphases;
    uint32_t *phase_ordinal;
    uint64_t *phase_kernel_ns;
    uint64_t *touch_offsets; /* nphases + 1 offsets into touch */
    transit_range *touch;
} profile_summary;

/* The JSON fields the builder renders (no braces; the caller adds identity and config): a
 * malloc'd string, or NULL when out of memory; with `summary`, the chunk table too. Pure: no
 * CUDA, no global state (CPU-tested). */
TRANSIT_INTERNAL char *transit_profile_build(const profile_input *in, profile_summary *summary);
TRANSIT_INTERNAL void transit_profile_summary_free(profile_summary *summary);

#endif
