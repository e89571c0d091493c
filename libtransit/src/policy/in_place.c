/* in_place.c - SetAccessedBy(device) on every managed allocation, once, and on each later one:
 * from then on host data is read in place (no fault migrates it). Advise applies it halfway
 * through the first iteration after warm-up; hybrid before it places its chunks, and its guard
 * for advise's block. */
#include "alloc_table.h"
#include "policy_int.h"

#include <inttypes.h>
#include <stdlib.h>

static void advise_range(const transit_driver_api *drv, uint64_t ptr, uint64_t size, CUdevice dev)
{
    static int warned;
    CUresult e = transit_act_accessed_by(drv, ptr, size, dev);
    if (e != CUDA_SUCCESS) {
        transit_add(&pol.n.advise_errors, 1);
        transit_warn_once(&warned, "advise: cuMemAdvise(SetAccessedBy)", drv, e);
        return;
    }
    transit_add(&pol.n.advise_calls, 1);
    transit_add(&pol.n.advise_bytes, size);
}

bool pol_in_place_applied(void)
{
    return __atomic_load_n(&pol.advise_applied, __ATOMIC_ACQUIRE);
}

/* Once: every allocation in the table now, later ones in pol_in_place_on_alloc. */
void pol_in_place_all(const transit_driver_api *drv, CUdevice dev)
{
    size_t n;
    if (__atomic_exchange_n(&pol.advise_applied, 1, __ATOMIC_ACQ_REL))
        return;
    pol_publish_demand();
    transit_alloc *all = transit_alloc_snapshot(TRANSIT_ALLOC_MANAGED, &n); /* no lock across driver calls */
    for (size_t i = 0; i < n; i++)
        advise_range(drv, all[i].key, all[i].size, dev);
    free(all);
    if (transit_g.cfg.verbose)
        transit_log("advise: SetAccessedBy(device %d) on %" PRIu64 " allocations, %" PRIu64 " bytes", (int)dev,
                    transit_get(&pol.n.advise_calls), transit_get(&pol.n.advise_bytes));
}

void pol_in_place_on_alloc(uint64_t ptr, uint64_t size, int device)
{
    const transit_driver_api *drv;
    if (pol_in_place_applied() && (drv = transit_act_driver())) {
        CUstreamCaptureMode saved;
        bool relaxed = transit_act_relax_capture(drv, &saved);
        advise_range(drv, ptr, size, device);
        transit_act_restore_capture(drv, relaxed, &saved);
    }
}
