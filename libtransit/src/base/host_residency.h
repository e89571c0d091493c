/* host_residency.h - how much managed memory the host holds, read from /proc/self/smaps, and
 * the process's resident bytes from /proc/self/statm.
 *
 * Managed allocations are mappings of /dev/nvidia-uvm; their Rss is what sits in host pages.
 * Limit mode checks its estimate against it: CUPTI's migration records were measured to miss
 * migrations back to the device (bench/README.md, "Measuring TRANSIT's device memory"). */
#ifndef TRANSIT_HOST_RESIDENCY_H
#define TRANSIT_HOST_RESIDENCY_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Sum of the Rss of the /dev/nvidia-uvm mappings in smaps text (NUL-terminated), in bytes;
 * -1 when there is no such mapping. */
TRANSIT_INTERNAL int64_t transit_uvm_host_rss_parse(const char *smaps);
/* The same for this process, now; -1 when /proc/self/smaps cannot be read or has no such
 * mapping. Not thread-safe: one caller (the tick thread). */
int64_t transit_uvm_host_rss(void);

/* Resident bytes of a /proc/<pid>/statm text (its second field, in pages of page_bytes); -1
 * when malformed. */
TRANSIT_INTERNAL int64_t transit_statm_rss_parse(const char *statm, uint64_t page_bytes);
/* This process's resident bytes, now: anonymous, file and shared pages alike, so also the host
 * pages of managed memory (they are mapped into the process). A read of one counter, not a walk
 * of every page table like smaps: limit mode reads it every tick and takes the managed part
 * from it with the non-managed rest measured at the last smaps reading (policy.c). -1 when
 * /proc/self/statm cannot be read. */
int64_t transit_process_rss(void);

/* Bytes of [addr, addr + bytes) that sit in host pages now, from the present bit of each page's
 * /proc/self/pagemap entry (fd: that file, open; PFNs are not needed, so any user may read it).
 * A managed page the host holds is mapped into the process, as smaps' Rss counts it. -1 when the
 * read fails. */
TRANSIT_INTERNAL int64_t transit_host_bytes_in(int fd, uint64_t addr, uint64_t bytes);

#endif
