/* stream.h - hybrid's look-ahead: which of the chunks its placement leaves on the host a mover
 * brings in ahead of their first use in the iteration and sends back after their last, a pure
 * function of the profile's phases and the link rates.
 *
 * A host chunk read in place crosses PCIe once per phase that touches it; streamed, twice per
 * iteration (in, and back). So only chunks touched by two phases or more are streamed, and only
 * when the transfer is covered: the mover issues at phase starts (it acts at launches), on one
 * HtoD side stream and one DtoH side stream, each transfer after the one before it; a chunk in
 * flight or staged holds a 2 MiB slot of the staging room from its issue until it is back on the
 * host. A chunk is streamed if it can be issued (link and a slot free) at a phase start early
 * enough to arrive before its first phase begins; otherwise it stays read in place. Chunks are
 * taken by first use (then address): the plan is the same every run. */
#ifndef TRANSIT_STREAM_H
#define TRANSIT_STREAM_H

#include "internal.h"
#include "ranges.h"

#include <stdint.h>

#define TRANSIT_STREAM_NONE UINT32_MAX /* the chunk is not streamed */
/* The link rates the live mover plans with: the H200's measured prefetch rates (transit replay's
 * defaults, docs/results.md). */
#define TRANSIT_STREAM_HTOD_BPS 47.7e9
#define TRANSIT_STREAM_DTOH_BPS 12.9e9

typedef struct transit_stream_input {
    uint32_t nphases;
    const uint64_t *touch_offsets; /* nphases + 1 offsets into touch */
    const transit_range *touch;    /* each phase's chunks, as 2 MiB aligned address ranges */
    const uint64_t *compute_ns;    /* each phase's kernel time */
    uint64_t nchunks;
    const uint64_t *chunk_addr; /* every touched chunk, ascending */
    const uint8_t *resident;    /* the placement: 1 on the device, 0 on the host */
    uint64_t staging_bytes;     /* device room for chunks in flight or staged */
    double htod_bps, dtoh_bps;
    const uint32_t *first_ordinal; /* each phase's first launch ordinal: the schedule's key (the plan needs none) */
} transit_stream_input;

/* The index of the chunk at addr in chunk_addr[0..n) (ascending), or n when it is not there. */
TRANSIT_INTERNAL uint64_t transit_chunk_at(const uint64_t *chunk_addr, uint64_t n, uint64_t addr);

/* For each chunk i: issue[i], the phase at whose start the mover brings it in, and back[i], the
 * phase after whose kernels it sends it back; both TRANSIT_STREAM_NONE for a chunk not streamed.
 * *peak_staged_bytes: the most staging room the plan holds at once. 0, or -1 out of memory. */
TRANSIT_INTERNAL int transit_stream_plan(const transit_stream_input *in, uint32_t *issue, uint32_t *back,
                                         uint64_t *peak_staged_bytes);

/* The mover's work per phase, from a plan: the chunks it brings in at each phase's start; those
 * it sends back there, their last use having ended with the phase before (the iteration's last
 * phase's go back at the next iteration's first, unless that phase brings them in again: then
 * they stay); and the phase whose issues each phase's kernels wait for, the latest among the
 * chunks it is the first to use. */
typedef struct transit_stream_schedule {
    uint32_t nphases;
    uint32_t *ordinal;                   /* each phase's first launch ordinal, ascending */
    uint64_t *in_offsets, *back_offsets; /* nphases + 1 offsets into in and back */
    transit_range *in, *back;            /* each phase's, coalesced, by address */
    uint32_t *wait;                      /* per phase; TRANSIT_STREAM_NONE: it waits for none */
    uint64_t streamed_bytes;             /* each way, per iteration */
} transit_stream_schedule;

/* Fills *out from the plan issue/back (transit_stream_plan over the same input, with
 * first_ordinal). 0, or -1 out of memory (*out then empty). */
TRANSIT_INTERNAL int transit_stream_schedule_make(const transit_stream_input *in, const uint32_t *issue,
                                                  const uint32_t *back, transit_stream_schedule *out);
TRANSIT_INTERNAL void transit_stream_schedule_free(transit_stream_schedule *s);

#endif
