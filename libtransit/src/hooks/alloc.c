/* alloc.c - what every allocation hook does around the real call, whichever API level it sits
 * at: limit mode's guard and room first, then the bookkeeping, the recorder's start and the
 * policies. */
#include "alloc_table.h"
#include "hooks.h"
#include "lifecycle.h"
#include "policy.h"

int transit_hook_admit(int device, uint64_t size)
{
    if (transit_mem_admit(device, size))
        return -1;
    if (transit_limit_mode() && device >= 0 && device < TRANSIT_MAX_DEVICES)
        transit_policy_before_alloc(size);
    return 0;
}

void transit_hook_allocated(uint64_t ptr, uint64_t size, int device)
{
    transit_mem_allocated(ptr, size, device);
    transit_lifecycle_first_managed();
    transit_policy_on_alloc(ptr, size, device);
}

int transit_hook_freed(uint64_t ptr)
{
    uint64_t size;
    if (!transit_mem_freed(ptr, &size))
        return 0;
    transit_policy_on_free(ptr, size);
    return 1;
}

void transit_hook_limit_info(size_t *free_bytes, size_t *total_bytes)
{
    transit_mem_limit_info(transit_policy_resident(), free_bytes, total_bytes);
}
