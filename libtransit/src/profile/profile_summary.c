/* profile_summary.c - the profile as numbers for hybrid's placement and mover (profile_data.h). */
#include "profile_build_int.h"
#include "chunks.h"

#include <stdlib.h>

/* The last profiled iteration's phases, copied out (the summary's second half). */
static int summarize_phases(const build *b, profile_summary *out)
{
    const iteration *it = b->in->iterations ? &b->it[b->in->iterations - 1] : NULL;
    uint32_t n = it ? it->nphases : 0;
    uint64_t ranges = 0;
    for (uint32_t q = 0; q < n; q++)
        ranges += it->touch[q].n;
    out->phase_ordinal = malloc((n + 1) * sizeof *out->phase_ordinal);
    out->phase_kernel_ns = malloc((n + 1) * sizeof *out->phase_kernel_ns);
    out->touch_offsets = malloc((n + 1) * sizeof *out->touch_offsets);
    out->touch = malloc((ranges + 1) * sizeof *out->touch);
    if (!out->phase_ordinal || !out->phase_kernel_ns || !out->touch_offsets || !out->touch)
        return -1;
    out->touch_offsets[0] = 0;
    for (uint32_t q = 0; q < n; q++) {
        out->phase_ordinal[q] = (uint32_t)it->phase_first[q];
        out->phase_kernel_ns[q] = it->timed ? it->phase_kernel_ns[q] : 0;
        uint64_t at = out->touch_offsets[q];
        for (size_t r = 0; r < it->touch[q].n; r++)
            out->touch[at + r] = (transit_range){it->touch[q].v[r].lo << TRANSIT_CHUNK_SHIFT,
                                                 (it->touch[q].v[r].hi - it->touch[q].v[r].lo + 1) << TRANSIT_CHUNK_SHIFT};
        out->touch_offsets[q + 1] = at + it->touch[q].n;
    }
    out->nphases = n;
    return 0;
}

void profile_summarize(const build *b, profile_summary *out)
{
    out->chunks = malloc((b->nchunks + 1) * sizeof *out->chunks);
    out->reuse = malloc((b->nchunks + 1) * sizeof *out->reuse);
    if (!out->chunks || !out->reuse || summarize_phases(b, out)) {
        transit_profile_summary_free(out);
        return;
    }
    for (size_t i = 0; i < b->nchunks; i++) {
        out->chunks[i] = b->chunks[i];
        out->reuse[i] = (uint32_t)b->c_reuse[i];
    }
    out->n = b->nchunks;
}

TRANSIT_INTERNAL void transit_profile_summary_free(profile_summary *s)
{
    free(s->chunks);
    free(s->reuse);
    free(s->phase_ordinal);
    free(s->phase_kernel_ns);
    free(s->touch_offsets);
    free(s->touch);
    *s = (profile_summary){0};
}
