/* policy.c - placement policies. Until the recorder reports migrations, TRANSIT's estimate
 * of device-resident managed memory is its live managed bytes, capped at the limit. */
#include "policy.h"
#include "internal.h"
#include "iteration.h"
#include "state.h"

#include <inttypes.h>

static uint64_t resident_peak;

void transit_policy_init(void) {}

void transit_policy_after_fork(void)
{
    transit_iteration_reset();
    resident_peak = 0;
}

uint64_t transit_policy_resident(void)
{
    uint64_t live = transit_get(&transit_g.n.managed_live);
    return transit_limit_mode() ? TRANSIT_MIN(live, transit_g.cfg.mem_limit) : live;
}

void transit_policy_on_alloc(uint64_t ptr, uint64_t size, int device)
{
    (void)ptr, (void)size, (void)device;
    transit_raise_peak(&resident_peak, transit_policy_resident());
}

void transit_policy_on_free(uint64_t ptr, uint64_t size)
{
    (void)ptr, (void)size;
}

void transit_policy_stats_json(jbuf *b)
{
    uint64_t live = transit_get(&transit_g.n.managed_live);
    uint64_t resident = transit_policy_resident();
    jb_printf(b,
              "\"resident_bytes\": %" PRIu64 ", \"resident_peak_bytes\": %" PRIu64
              ", \"overshoot_peak_bytes\": 0, \"spilled_peak_bytes\": %" PRIu64 "}, ",
              resident, resident_peak, live > resident ? live - resident : 0);
    transit_iteration_stats_json(b, transit_g.cfg.warmup_iters);
    jb_printf(b, "\"recorder\": {\"state\": \"off\"}, ");
}
