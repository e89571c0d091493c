/* policy.h - what the placement policies (base, prefetch, advise) and the recorder that
 * feeds them offer the rest of libtransit. */
#ifndef TRANSIT_POLICY_H
#define TRANSIT_POLICY_H

#include "json.h"

#include <stdint.h>

void transit_policy_init(void);
void transit_policy_after_fork(void);
void transit_policy_on_alloc(uint64_t ptr, uint64_t size, int device);
void transit_policy_on_free(uint64_t ptr, uint64_t size);
/* Bytes of managed memory believed resident on the device (limit mode's estimate). */
uint64_t transit_policy_resident(void);
/* The recorder/policy sections of the stats document, each followed by ", ". */
void transit_policy_stats_json(jbuf *b);

#endif
