/* timeline.h - one entry per iteration mark (the last TIMELINE_ENTRIES): what the recorder and the
 * policies had done by then, cumulative, so that a step's share is a difference. */
#ifndef TRANSIT_TIMELINE_H
#define TRANSIT_TIMELINE_H

#include <stdint.h>

#define TIMELINE_ENTRIES 512

typedef struct transit_timeline_entry {
    double t; /* seconds since activation */
    uint64_t iteration, resident, htod, dtoh, faults, evicted;
    uint64_t bound_peak; /* limit mode's measured bound, highest since the previous entry; UINT64_MAX: unmeasured */
} transit_timeline_entry;

void transit_timeline_add(const transit_timeline_entry *e);
/* Entries added so far (the ring keeps the last TIMELINE_ENTRIES), and entry i of them. */
uint64_t transit_timeline_count(void);
const transit_timeline_entry *transit_timeline_entry_at(uint64_t i);
void transit_timeline_after_fork(void);

#endif
