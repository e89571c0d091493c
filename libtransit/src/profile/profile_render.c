/* profile_render.c - the profile's aggregation as the transit.profile/1 fields (docs/profile.md):
 * no braces, the caller adds identity and config. Pure. */
#include "profile_build_int.h"
#include "chunks.h"

#include <inttypes.h>

static void u64_array(jbuf *j, const uint64_t *v, size_t n)
{
    jb_printf(j, "[");
    for (size_t i = 0; i < n; i++)
        jb_printf(j, i ? ", %" PRIu64 : "%" PRIu64, v[i]);
    jb_printf(j, "]");
}

static void i64_array(jbuf *j, const int64_t *v, size_t n)
{
    jb_printf(j, "[");
    for (size_t i = 0; i < n; i++)
        jb_printf(j, i ? ", %" PRId64 : "%" PRId64, v[i]);
    jb_printf(j, "]");
}

static void render_iteration(jbuf *j, const build *b, uint32_t i)
{
    const profile_input *in = b->in;
    const iteration *it = &b->it[i];
    jb_printf(j,
              "{\"iteration\": %" PRIu64 ", \"kernels\": %u, \"timed\": %s, \"span_ns\": %" PRIu64
              ", \"kernel_ns\": %" PRIu64 ", \"htod_bytes\": %" PRIu64 ", \"dtoh_bytes\": %" PRIu64
              ", \"gpu_page_faults\": %" PRIu64 ", \"remote_map_bytes\": %" PRIu64 ", \"kernel_name\": [",
              in->first_iteration + i, it->kernels, it->timed ? "true" : "false", it->t1 - it->t0, it->kernel_ns,
              it->htod, it->dtoh, it->faults, it->remote);
    for (uint32_t o = 0; o < it->nordinals; o++) {
        const profile_launch *l = it->by_ordinal[o] ? &in->launches[it->by_ordinal[o] - 1] : NULL;
        jb_printf(j, o ? ", %" PRId64 : "%" PRId64, l ? (int64_t)l->name : (int64_t)-1);
    }
    jb_printf(j, "], \"kernel_duration_ns\": [");
    for (uint32_t o = 0; o < it->nordinals; o++) {
        const profile_launch *l = it->by_ordinal[o] ? &in->launches[it->by_ordinal[o] - 1] : NULL;
        uint64_t d = l && l->start_ns && l->end_ns >= l->start_ns ? l->end_ns - l->start_ns : 0;
        jb_printf(j, o ? ", %" PRIu64 : "%" PRIu64, d);
    }
    jb_printf(j, "], \"phases\": {\"first_ordinal\": ");
    u64_array(j, it->phase_first, it->nphases);
    jb_printf(j, ", \"start_ns\": [");
    for (uint32_t q = 0; q < it->nphases; q++)
        jb_printf(j, q ? ", %" PRIu64 : "%" PRIu64, it->phase_start[q] ? it->phase_start[q] - it->t0 : 0);
    jb_printf(j, "], \"end_ns\": [");
    for (uint32_t q = 0; q < it->nphases; q++)
        jb_printf(j, q ? ", %" PRIu64 : "%" PRIu64, it->phase_end[q] ? it->phase_end[q] - it->t0 : 0);
    jb_printf(j, "], \"kernel_ns\": ");
    u64_array(j, it->phase_kernel_ns, it->nphases);
    jb_printf(j, ", \"htod_bytes\": ");
    u64_array(j, it->phase_htod, it->nphases);
    jb_printf(j, ", \"dtoh_bytes\": ");
    u64_array(j, it->phase_dtoh, it->nphases);
    jb_printf(j, ", \"gpu_page_faults\": ");
    u64_array(j, it->phase_faults, it->nphases);
    jb_printf(j, ", \"touch\": [");
    for (uint32_t q = 0; q < it->nphases; q++) {
        jb_printf(j, q ? ", [" : "[");
        for (size_t r = 0; r < it->touch[q].n; r++)
            jb_printf(j, r ? ", %" PRIu64 ", %" PRIu64 : "%" PRIu64 ", %" PRIu64, it->touch[q].v[r].lo,
                      it->touch[q].v[r].hi);
        jb_printf(j, "]");
    }
    jb_printf(j, "]}}");
}

void profile_render(jbuf *j, const build *b)
{
    const profile_input *in = b->in;
    jb_printf(j,
              "\"chunk_bytes\": %llu, \"phases_max\": %u, \"bounds\": {\"launches\": %u, \"pointers\": %u, "
              "\"records\": %u, \"names\": %u}, \"dropped\": {\"launches\": %" PRIu64 ", \"pointers\": %" PRIu64
              ", \"records\": %" PRIu64 ", \"pointers_outside_allocations\": %" PRIu64
              ", \"records_outside_iterations\": %" PRIu64 "}, \"scan\": {\"pointers\": %" PRIu64
              ", \"pointers_carried\": %" PRIu64 ", \"launches_unread\": %" PRIu64 "}, \"window\": {\"first_iteration\": %" PRIu64
              ", \"iterations\": %u}, \"allocations\": [",
              TRANSIT_CHUNK_BYTES, PROFILE_MAX_PHASES, PROFILE_MAX_LAUNCHES, PROFILE_MAX_REFS, PROFILE_MAX_EVENTS,
              PROFILE_MAX_NAMES, in->dropped_launches, in->dropped_refs, in->dropped_events, b->refs_outside,
              b->events_outside, in->nrefs, b->refs_carried, in->unread_launches, in->first_iteration, in->iterations);
    for (uint64_t a = 0; a < in->nallocs; a++)
        jb_printf(j, a ? ", [%" PRIu64 ", %" PRIu64 "]" : "[%" PRIu64 ", %" PRIu64 "]", in->allocs[a].addr,
                  in->allocs[a].bytes);
    jb_printf(j, "], \"kernel_names\": [");
    for (uint64_t k = 0; k < in->nnames; k++) {
        jb_str(j, in->names[k]);
        jb_printf(j, ", ");
    }
    jb_trim_comma(j);
    jb_printf(j, "], \"iterations\": [");
    for (uint32_t i = 0; i < in->iterations; i++) {
        render_iteration(j, b, i);
        jb_printf(j, ", ");
    }
    jb_trim_comma(j);
    jb_printf(j, "], \"chunks\": {\"chunk\": ");
    u64_array(j, b->chunks, b->nchunks);
    jb_printf(j, ", \"allocation\": ");
    i64_array(j, b->c_alloc, b->nchunks);
    jb_printf(j, ", \"htod_bytes\": ");
    u64_array(j, b->c_htod, b->nchunks);
    jb_printf(j, ", \"dtoh_bytes\": ");
    u64_array(j, b->c_dtoh, b->nchunks);
    jb_printf(j, ", \"gpu_page_faults\": ");
    u64_array(j, b->c_faults, b->nchunks);
    jb_printf(j, ", \"remote_map_bytes\": ");
    u64_array(j, b->c_remote, b->nchunks);
    jb_printf(j, ", \"reuse\": ");
    u64_array(j, b->c_reuse, b->nchunks);
    jb_printf(j, ", \"launches\": ");
    u64_array(j, b->c_launches, b->nchunks);
    jb_printf(j, ", \"rereading_launches\": ");
    u64_array(j, b->c_rereading, b->nchunks);
    jb_printf(j, ", \"first_phase\": ");
    i64_array(j, b->c_first, b->nchunks);
    jb_printf(j, ", \"last_phase\": ");
    i64_array(j, b->c_last, b->nchunks);
    jb_printf(j, "}");
}
