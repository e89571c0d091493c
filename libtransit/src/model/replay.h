/* replay.h - `transit replay`: the policies' decisions (decide.h, chunks.h) run over a recorded
 * profile's iteration on a CPU, against a simulated device.
 *
 * The simulated device holds whole 2 MiB chunks. A phase touches its chunks (the profile's
 * `touch`); what each policy does before the phase's kernels run:
 *   base     - the chunks it needs are faulted in (HtoD at the fault-driven rate), the least
 *              recently used others evicted to the host first (transit_chunks_make_room, as limit
 *              mode's planned launches do), down to the launches' target;
 *   prefetch - the same chunks, brought in by prefetch (the prefetch rate), no faults;
 *   advise   - as base until the launch halfway through the first iteration after warm-up
 *              (transit_decide_advise_at_launch); from there every access to a chunk on the host
 *              is read in place (zero-copy rate) and nothing migrates, but advise's fill: once an
 *              iteration passed without moves, the device is filled towards FILL_TARGET with host
 *              chunks in address order (transit_decide_fill_*);
 *   hybrid   - as base until the profile is built (the window's drain ends: iteration warmup + 2
 *              begins placed); then the most reused chunks are on the device up to its capacity
 *              (transit_hybrid_place), the rest on the host, read in place; nothing migrates.
 *              With look_ahead, hybrid's mover (stream.h, as libtransit runs it in limit mode):
 *              the host chunks the stream plan picks cross PCIe in and back once per iteration,
 *              behind the compute, staged in the TRANSIT_HYBRID_STAGING margin under L, instead
 *              of being read in place.
 * Each phase's step time is its compute time plus its transfers (the policies queue their
 * migrations on the kernels' stream, and zero-copy reads stall the kernels that make them).
 * The estimate is the truth here: no records lag, no bound or sweep is needed. */
#ifndef TRANSIT_REPLAY_H
#define TRANSIT_REPLAY_H

#include "internal.h"
#include "ranges.h"

#include <stdint.h>

typedef struct transit_replay_input {
    uint32_t nphases;
    const uint64_t *touch_offsets; /* nphases + 1 offsets into touch */
    const transit_range *touch;    /* each phase's chunks, as 2 MiB aligned address ranges */
    const uint64_t *compute_ns;    /* each phase's kernel time */
    const uint32_t *first_launch;  /* each phase's first launch ordinal */
    uint32_t launches;             /* launches in the iteration */
    /* Every chunk some phase touches, by address, with its reuse (hybrid's placement). */
    uint64_t nchunks;
    const uint64_t *chunk_addr;
    const uint32_t *chunk_reuse;
} transit_replay_input;

typedef struct transit_replay_params {
    int policy;        /* transit_policy */
    uint64_t limit;    /* L */
    uint32_t warmup;   /* iterations before the counted ones (the window and its drain) */
    uint32_t iterations;
    double prefetch_htod_bps, dtoh_bps, fault_htod_bps, zero_copy_bps;
    int look_ahead; /* hybrid: with its mover's stream plan */
} transit_replay_params;

typedef struct transit_replay_iteration {
    uint64_t htod_bytes, dtoh_bytes, faults, zero_copy_bytes, evicted_chunks, resident_peak_bytes;
    uint64_t fill_bytes;     /* advise's fill, part of htod_bytes */
    uint64_t streamed_bytes; /* hybrid's mover, each way: part of htod_bytes and of dtoh_bytes */
    double compute_s, transfer_s, step_s;
} transit_replay_iteration;

/* Replays params->iterations iterations after params->warmup uncounted ones into out[]. 0, or -1
 * with one line in err (no memory). */
TRANSIT_INTERNAL int transit_replay_run(const transit_replay_input *in, const transit_replay_params *params,
                                        transit_replay_iteration *out, char *err, size_t errlen);

#endif
