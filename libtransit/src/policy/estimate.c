/* estimate.c - limit mode's estimate of what the device holds, in 2 MiB chunks (chunks.c): what
 * the migration records and TRANSIT's own moves make resident or take away. */
#include "alloc_table.h"
#include "policy_int.h"

#include <stdlib.h>

/* ---- limit mode: the chunk estimate (chunks_lock held) ---- */

transit_chunks *pol_chunks_locked(void)
{
    if (!pol.chunks) {
        uint64_t device = transit_device_bytes() ? transit_device_bytes() : DEFAULT_DEVICE_BYTES;
        uint64_t bytes = TRANSIT_MAX(device, 2 * transit_g.cfg.mem_limit);
        if (!(pol.chunks = transit_chunks_create((size_t)(bytes / TRANSIT_CHUNK_BYTES)))) {
            static int warned;
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                transit_warn("limit mode: out of memory for the residency estimate; no evictions");
        }
    }
    return pol.chunks;
}

void pol_chunks_changed(void)
{
    uint64_t resident = transit_chunks_resident_bytes(pol.chunks);
    __atomic_store_n(&pol.n.resident, resident, __ATOMIC_RELAXED);
    if (pol_estimating()) /* without records the estimate is only the eviction clock's */
        pol_raise_peaks(resident);
}

/* Cold: only the chunks the estimate lacks, as the next victims (see engine.c's htod). */
void pol_mark_resident(uint64_t addr, uint64_t bytes, bool cold)
{
    pthread_mutex_lock(&pol.chunks_lock);
    if (pol_chunks_locked()) {
        uint64_t untracked = 0;
        if (cold)
            transit_add(&pol.n.cold_bytes, transit_chunks_arrived_cold(pol.chunks, addr, bytes, &untracked));
        else
            untracked = transit_chunks_migrated(pol.chunks, addr, bytes);
        transit_add(&pol.n.untracked_bytes, untracked);
        pol_chunks_changed();
    }
    pthread_mutex_unlock(&pol.chunks_lock);
}

void pol_mark_gone(uint64_t addr, uint64_t bytes)
{
    pthread_mutex_lock(&pol.chunks_lock);
    if (pol.chunks) {
        transit_chunks_dropped(pol.chunks, addr, bytes);
        pol_chunks_changed();
    }
    pthread_mutex_unlock(&pol.chunks_lock);
}

static int by_address(const void *a, const void *b)
{
    uint64_t x = ((const transit_alloc *)a)->key, y = ((const transit_alloc *)b)->key;
    return (x > y) - (x < y);
}

/* Without migration records the estimate never sees data fault back in: each chunk evicted stays
 * counted on the host. So once the bound asks for more than the estimate has left, every live
 * managed allocation counts resident again, in address order, the lowest as the next victim: the
 * evictions go round the managed memory like a clock hand, not by recency (a chunk the host holds
 * already costs a prefetch that moves nothing, and the bound, read again, asks on). False when
 * nothing is allocated (or no memory for the snapshot). */
bool pol_rewind_clock(void)
{
    size_t n;
    transit_alloc *all = transit_alloc_snapshot(TRANSIT_ALLOC_MANAGED, &n);
    if (!all)
        return false;
    qsort(all, n, sizeof *all, by_address);
    pthread_mutex_lock(&pol.chunks_lock);
    if (pol_chunks_locked()) {
        for (size_t i = 0; i < n; i++)
            transit_chunks_migrated(pol.chunks, all[i].key, all[i].size);
        pol_chunks_changed();
    }
    pthread_mutex_unlock(&pol.chunks_lock);
    free(all);
    transit_add(&pol.n.clock_rewinds, 1);
    return true;
}
