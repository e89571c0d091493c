/* api.c - the public C API (transit.h). */
#include "internal.h"
#include "iteration.h"
#include "lifecycle.h"
#include "state.h"
#include "stats.h"
#include "transit.h"

#include <stdlib.h>
#include <string.h>

TRANSIT_API const char *transit_version(void)
{
    return TRANSIT_VERSION;
}

TRANSIT_API void transit_mark_iteration(void)
{
    transit_iteration_mark(TRANSIT_ITER_API);
}

/* Called by the Python optimizer-step hook (transit/pyhook); not in the public header. */
TRANSIT_API void transit_pyhook_mark_iteration(void)
{
    transit_iteration_mark(TRANSIT_ITER_PYHOOK);
}

/* Called by the Python hook once it is registered, before the program's first step. */
TRANSIT_API void transit_pyhook_armed(void)
{
    transit_iteration_claim(TRANSIT_ITER_PYHOOK);
}

TRANSIT_API char *transit_stats_json(void)
{
    size_t cap = 1u << 16;
    for (;;) {
        char *p = malloc(cap);
        jbuf b = {p, 0, cap, 0};
        if (!p)
            return NULL;
        transit_stats_render(&b, NULL);
        if (!b.overflow)
            return p;
        free(p);
        cap *= 4;
    }
}

TRANSIT_API void transit_free(void *p)
{
    free(p);
}
