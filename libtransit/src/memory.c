/* memory.c - allocation bookkeeping and the limit-mode guard. */
#include "memory.h"
#include "alloc_table.h"
#include "internal.h"
#include "policy.h"
#include "state.h"

#include <stdint.h>

static uint64_t last_refused_size;

/* VMM handles share the table with device pointers, which never have the top bit set. */
static uint64_t vmm_key(uint64_t handle)
{
    return handle | (1ULL << 63);
} /* a retry of the same refused request counts once */

void transit_mem_after_fork(void)
{
    last_refused_size = 0;
}

bool transit_mem_need_budget(int device)
{
    return device >= 0 && device < TRANSIT_MAX_DEVICES && transit_g.phys_budget[device] == 0;
}

void transit_mem_set_budget(int device, uint64_t free_bytes, uint64_t total_bytes)
{
    if (device < 0 || device >= TRANSIT_MAX_DEVICES)
        return;
    uint64_t usable = free_bytes + transit_get(&transit_g.n.vmm_live);
    transit_g.phys_budget[device] = usable > TRANSIT_PHYS_MARGIN ? usable - TRANSIT_PHYS_MARGIN : 1;
    if (!transit_g.device_total[device])
        transit_g.device_total[device] = total_bytes;
    if (transit_limit_mode() && transit_g.cfg.mem_limit > transit_g.phys_budget[device])
        transit_warn("TRANSIT_MEM_LIMIT (%llu bytes) is above the device's usable free memory (%llu bytes)",
                     (unsigned long long)transit_g.cfg.mem_limit,
                     (unsigned long long)transit_g.phys_budget[device]);
}

int transit_mem_admit(int device, uint64_t size)
{
    if (!transit_limit_mode() || device < 0 || device >= TRANSIT_MAX_DEVICES)
        return 0;
    uint64_t budget = transit_g.phys_budget[device];
    uint64_t in_use = transit_get(&transit_g.n.managed_live) + transit_get(&transit_g.n.vmm_live);
    if (!budget || (size <= budget && in_use <= budget - size)) {
        transit_policy_before_alloc(size);
        return 0;
    }
    transit_add(&transit_g.n.refused_calls, 1);
    if (__atomic_exchange_n(&last_refused_size, size, __ATOMIC_RELAXED) != size) {
        transit_add(&transit_g.n.refused, 1);
        transit_add(&transit_g.n.refused_bytes, size);
        transit_log("refused a managed allocation of %llu bytes on device %d: the process would hold %llu bytes, "
                    "past the %llu bytes of physical device memory limit mode may use",
                    (unsigned long long)size, device, (unsigned long long)(in_use + size),
                    (unsigned long long)budget);
    }
    return -1;
}

void transit_mem_allocated(uint64_t ptr, uint64_t size, int device)
{
    transit_alloc a = {.key = ptr, .size = size, .device = device, .kind = TRANSIT_ALLOC_MANAGED};
    __atomic_store_n(&last_refused_size, 0, __ATOMIC_RELAXED);
    if (transit_alloc_insert(&a))
        transit_warn("allocation table is out of memory; a free of %llu bytes will not be matched",
                     (unsigned long long)size);
    transit_add(&transit_g.n.alloc_count, 1);
    transit_add(&transit_g.n.managed_total, size);
    transit_add(&transit_g.n.managed_live, size);
    transit_raise_peak(&transit_g.n.managed_peak, transit_get(&transit_g.n.managed_live));
    transit_note_cuda_ok();
    transit_note_device(device);
    transit_policy_on_alloc(ptr, size, device);
}

int transit_mem_freed(uint64_t ptr)
{
    transit_alloc a;
    if (!transit_alloc_remove(ptr, &a))
        return 0;
    transit_add(&transit_g.n.free_count, 1);
    transit_sub(&transit_g.n.managed_live, a.size);
    transit_policy_on_free(ptr, a.size);
    return 1;
}

void transit_vmm_created(uint64_t handle, uint64_t size, int device)
{
    transit_alloc a = {.key = vmm_key(handle), .size = size, .device = device, .kind = TRANSIT_ALLOC_VMM};
    transit_alloc_insert(&a);
    transit_add(&transit_g.n.vmm_count, 1);
    transit_add(&transit_g.n.vmm_live, size);
    transit_note_cuda_ok();
}

void transit_vmm_released(uint64_t handle)
{
    transit_alloc a;
    if (!transit_alloc_remove(vmm_key(handle), &a))
        return;
    transit_sub(&transit_g.n.vmm_live, a.size);
}

int transit_pitched_size(size_t width, size_t height, size_t *pitch, size_t *bytes)
{
    const size_t align = 512;
    if (width > SIZE_MAX - align)
        return -1;
    *pitch = (width + align - 1) / align * align;
    if (height && *pitch > SIZE_MAX / height)
        return -1;
    *bytes = *pitch * height;
    return 0;
}

void transit_mem_limit_info(size_t *free_bytes, size_t *total_bytes)
{
    uint64_t limit = transit_g.cfg.mem_limit;
    uint64_t resident = transit_policy_resident();
    *total_bytes = (size_t)limit;
    *free_bytes = (size_t)(resident < limit ? limit - resident : 0);
}
