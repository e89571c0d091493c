/* records.c - CUPTI's activity buffers and the records in them: kernels (with the ordinal their
 * correlation id gives), unified memory counters, external correlation; on CUPTI's buffer thread
 * or whichever thread flushes. */
#include "attrib.h"
#include "recorder_int.h"

#include <stdlib.h>

/* ---- activity records ---- */

void CUPTIAPI rec_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = NULL;
    *size = 0;
    *max_records = 0;
    pthread_mutex_lock(&rec.pool_lock);
    for (int i = 0; i < BUFFER_COUNT; i++) {
        if (rec.buffer_busy[i])
            continue;
        if (!rec.buffers[i]) {
            void *p = NULL;
            if (posix_memalign(&p, BUFFER_ALIGN, BUFFER_BYTES))
                break;
            rec.buffers[i] = p;
        }
        rec.buffer_busy[i] = 1;
        *buffer = rec.buffers[i];
        *size = BUFFER_BYTES;
        break;
    }
    pthread_mutex_unlock(&rec.pool_lock);
    if (!*buffer) /* CUPTI then drops records and counts them */
        transit_add(&rec.n.buffers_refused, 1);
}

static void release_buffer(uint8_t *buffer)
{
    pthread_mutex_lock(&rec.pool_lock);
    for (int i = 0; i < BUFFER_COUNT; i++)
        if (rec.buffers[i] == buffer)
            rec.buffer_busy[i] = 0;
    pthread_mutex_unlock(&rec.pool_lock);
}

void rec_corr_store(uint64_t *table, uint32_t corr, uint32_t ordinal)
{
    __atomic_store_n(&table[corr & (CORR_TABLE_SIZE - 1)], (uint64_t)corr << 32 | ordinal, __ATOMIC_RELAXED);
}

/* 1 and *ordinal when table holds corr. */
static int corr_find(const uint64_t *table, uint32_t corr, uint32_t *ordinal)
{
    uint64_t e = __atomic_load_n(&table[corr & (CORR_TABLE_SIZE - 1)], __ATOMIC_RELAXED);
    if (corr == 0 || (uint32_t)(e >> 32) != corr)
        return 0;
    *ordinal = (uint32_t)e;
    return 1;
}

static void kernel_record(uint32_t corr, uint64_t start, uint64_t end)
{
    uint32_t from_cb = 0, from_ext = 0, ordinal = TRANSIT_ATTRIB_NO_ORDINAL;
    transit_add(&rec.n.kernel_records, 1);
    if (!start || end < start) /* no timing (CUPTI lacked device memory, or a forced flush) */
        return;
    int cb = corr_find(rec.corr_from_callback, corr, &from_cb);
    int ext = corr_find(rec.corr_from_external, corr, &from_ext);
    if (cb)
        ordinal = from_cb;
    else if (ext)
        ordinal = from_ext;
    transit_add(cb ? &rec.n.corr_callback : ext ? &rec.n.corr_external : &rec.n.corr_none, 1);
    if (cb && ext)
        transit_add(from_cb == from_ext ? &rec.n.corr_cross_checked : &rec.n.corr_disagree, 1);
    rec.sink->kernel(corr, start, end, ordinal);
}

/* The counters here; the record itself to the sink (the policies' estimate, the profile). */
static void unified_memory_record(const CUpti_ActivityUnifiedMemoryCounter3 *u)
{
    transit_um_record r = {.start_ns = u->start, .addr = u->address, .value = u->value};
    if (__atomic_load_n(&rec.um_silent, __ATOMIC_RELAXED))
        __atomic_store_n(&rec.um_silent, 0, __ATOMIC_RELEASE);
    switch (u->counterKind) {
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
        transit_add(&rec.n.htod_bytes, u->value);
        transit_add(&rec.n.htod_count, 1);
        transit_hist_add(&rec.htod_hist, u->value);
        r.kind = TRANSIT_MIGRATION_HTOD;
        break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH:
        transit_add(&rec.n.dtoh_bytes, u->value);
        transit_add(&rec.n.dtoh_count, 1);
        transit_hist_add(&rec.dtoh_hist, u->value);
        /* TRANSIT's own evictions are prefetches (cause USER); the driver's are not ours. */
        r.evicted_by_driver = u->flags == CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION;
        if (r.evicted_by_driver)
            transit_add(&rec.n.unrequested_bytes, u->value);
        r.kind = TRANSIT_MIGRATION_DTOH;
        break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
        r.value = u->value ? u->value : 1; /* value: fault groups for the page */
        transit_add(&rec.n.gpu_faults, r.value);
        r.kind = TRANSIT_GPU_FAULT;
        break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
        transit_add(&rec.n.thrashing, 1);
        return;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP:
        transit_add(&rec.n.remote_map_bytes, u->value);
        r.kind = TRANSIT_REMOTE_MAP;
        break;
    default:
        return;
    }
    rec.sink->um_record(&r);
}

static void record(const CUpti_Activity *a)
{
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
        kernel_record(k->correlationId, k->start, k->end);
        break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const CUpti_ActivityExternalCorrelation *e = (const CUpti_ActivityExternalCorrelation *)a;
        if (e->externalKind == EXTERNAL_KIND)
            rec_corr_store(rec.corr_from_external, e->correlationId,
                       rec_window_ordinal(e->externalId >> 32, (uint32_t)e->externalId));
        break;
    }
    case CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER:
        unified_memory_record((const CUpti_ActivityUnifiedMemoryCounter3 *)a);
        break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        transit_add(&rec.n.api_records, 1);
        break;
    default:
        break;
    }
}

void CUPTIAPI rec_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)size;
    uint64_t t0 = transit_monotonic_ns();
    const transit_cupti_api *api = transit_cupti(NULL);
    size_t dropped = 0;
    if (api && buffer && valid) {
        CUpti_Activity *a = NULL;
        pthread_mutex_lock(&rec.records_lock);
        while (api->ActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS)
            record(a);
        pthread_mutex_unlock(&rec.records_lock);
    }
    if (api && api->ActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
        transit_add(&rec.n.dropped, dropped);
    if (buffer)
        release_buffer(buffer);
    uint64_t ns = transit_monotonic_ns() - t0;
    transit_add(&rec.n.overhead_ns, ns);
    transit_add(&rec.n.records_ns, ns);
}
