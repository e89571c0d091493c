/* timeline.c - see timeline.h. Entries are added by the thread that handles an iteration mark and
 * read without lock by the stats renderer. */
#include "timeline.h"

static struct {
    transit_timeline_entry ring[TIMELINE_ENTRIES];
    uint64_t count;
} tl;

void transit_timeline_add(const transit_timeline_entry *e)
{
    uint64_t i = __atomic_load_n(&tl.count, __ATOMIC_RELAXED);
    tl.ring[i % TIMELINE_ENTRIES] = *e;
    __atomic_store_n(&tl.count, i + 1, __ATOMIC_RELEASE);
}

uint64_t transit_timeline_count(void)
{
    return __atomic_load_n(&tl.count, __ATOMIC_ACQUIRE);
}

const transit_timeline_entry *transit_timeline_entry_at(uint64_t i)
{
    return &tl.ring[i % TIMELINE_ENTRIES];
}

void transit_timeline_after_fork(void)
{
    tl.count = 0;
}
