/* profile_build_int.h - the profile builder's working data, shared by its aggregation
 * (profile_build.c) and its summary for hybrid (profile_summary.c). */
#ifndef TRANSIT_PROFILE_BUILD_INT_H
#define TRANSIT_PROFILE_BUILD_INT_H

#include "json.h"
#include "profile_data.h"

#include <stddef.h>
#include <stdint.h>

#define CHUNK(addr) ((addr) >> TRANSIT_CHUNK_SHIFT)
#define NO_PHASE UINT32_MAX

typedef struct crange {
    uint64_t lo, hi; /* chunk numbers, inclusive */
} crange;

typedef struct cvec {
    crange *v;
    size_t n, cap;
} cvec;

/* One profiled iteration: its launches by ordinal, their phases, and what each phase did. */
typedef struct iteration {
    uint32_t *by_ordinal;       /* launch index + 1 per ordinal, 0 for a missing ordinal */
    uint32_t *phase_of;         /* per ordinal */
    uint32_t nordinals, nphases, kernels;
    int timed;
    uint64_t *phase_start;      /* absolute GPU ns of each phase's first kernel (timed only) */
    uint64_t *phase_end, *phase_kernel_ns, *phase_first;
    uint64_t *phase_htod, *phase_dtoh, *phase_faults;
    cvec *touch;                /* per phase */
    uint64_t t0, t1, kernel_ns; /* GPU span and kernel time */
    uint64_t htod, dtoh, faults, remote;
} iteration;

typedef struct build {
    const profile_input *in;
    iteration *it;
    uint64_t *ptrs;     /* distinct managed addresses the parameters held, sorted */
    uint64_t *ptr_end;  /* each one's extent: up to the next such address in its allocation */
    size_t nptrs;
    uint64_t *chunks;   /* every chunk touched or migrated, sorted */
    size_t nchunks;
    uint64_t *c_htod, *c_dtoh, *c_faults, *c_remote, *c_reuse;
    uint64_t *c_launches, *c_rereading; /* launch_counts */
    int64_t *c_alloc, *c_first, *c_last;
    uint64_t refs_outside, events_outside;
    uint64_t refs_carried; /* multi-tensor pointers that are a cut tensor's tail (transit_carried_over) */
} build;

/* Renders the fields (profile_render.c). */
void profile_render(jbuf *j, const build *b);
/* The chunk table's numbers and reuse and the last iteration's phases, copied out. */
void profile_summarize(const build *b, profile_summary *out);

#endif
