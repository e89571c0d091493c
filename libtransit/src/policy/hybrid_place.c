/* hybrid_place.c - hybrid's placement: at the end of each profiling window it is planned from
 * the profile's reuse (model/placement.c), and in limit mode its mover's schedule from the
 * profile's phases (model/stream.c); the tick thread applies the placement, off the launch path:
 * SetAccessedBy on every managed allocation (in_place.c), the chunks placed on the host
 * prefetched there, those placed on the device prefetched to it, on TRANSIT's own stream; the
 * schedule then goes to the mover (hybrid.c hands it over). From then on host data is read in
 * place unless the mover streams it; limit mode's bound stays the safety net. A new profile (the
 * kernel sequence changed) plans anew. */
#include "alloc_table.h"
#include "host_residency.h"
#include "hybrid_int.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The placement (hp.lock), planned at a profile's end and applied by the tick when due: the
 * profile's chunks, their reuse and where it keeps each (1: device; demotions clear it), and its
 * mover's schedule. */
static struct {
    pthread_mutex_t lock;
    transit_stream_schedule schedule;
    int due;
    int reading_due; /* an iteration mark since the last reading of where placed chunks are */
    uint64_t *chunk;
    uint32_t *reuse;
    uint8_t *resident;
    size_t nchunks;
} hp = {.lock = PTHREAD_MUTEX_INITIALIZER};

int hyb_reuse_class(uint32_t reuse)
{
    return reuse <= 1 ? 0 : reuse == 2 ? 1 : reuse <= 4 ? 2 : reuse <= 8 ? 3 : 4;
}

static int by_index(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* Appends chunk c to the run list (adjacent chunks coalesced); false when out of memory. */
static bool add_chunk(transit_range **v, size_t *n, size_t *cap, uint64_t c)
{
    uint64_t addr = c << TRANSIT_CHUNK_SHIFT;
    if (*n && (*v)[*n - 1].addr + (*v)[*n - 1].bytes == addr) {
        (*v)[*n - 1].bytes += TRANSIT_CHUNK_BYTES;
        return true;
    }
    if (*n == *cap) {
        size_t grown = *cap ? 2 * *cap : 256;
        transit_range *w = realloc(*v, grown * sizeof *w);
        if (!w)
            return false;
        *v = w;
        *cap = grown;
    }
    (*v)[(*n)++] = (transit_range){addr, TRANSIT_CHUNK_BYTES};
    return true;
}

/* hp.lock held: the placement's chunks on the device (on_device) or the host, as coalesced
 * ranges in address order; NULL when there are none or memory ran out (nothing is then moved). */
static transit_range *placed_ranges(bool on_device, size_t *n)
{
    transit_range *v = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < hp.nchunks; i++)
        if (hp.resident[i] == on_device && !add_chunk(&v, n, &cap, hp.chunk[i])) {
            free(v);
            *n = 0;
            return NULL;
        }
    return v;
}

/* Both halves of the placement, taken under hp.lock so that no driver call or page-table
 * walk runs while it is held. */
static void placed_halves(transit_range **host, size_t *nhost, transit_range **device, size_t *ndevice)
{
    pthread_mutex_lock(&hp.lock);
    *host = placed_ranges(0, nhost);
    *device = placed_ranges(1, ndevice);
    pthread_mutex_unlock(&hp.lock);
}

/* What the device can hold: L less the launches' margin in limit mode; the device less
 * TRANSIT_PHYS_MARGIN in physical mode. */
static uint64_t placement_capacity(void)
{
    uint64_t device = transit_device_bytes();
    if (transit_limit_mode())
        return transit_hybrid_capacity(transit_g.cfg.mem_limit);
    return device > TRANSIT_PHYS_MARGIN ? device - TRANSIT_PHYS_MARGIN : 0;
}

/* The mover's schedule over the profile's last iteration (limit mode: its staging is the margin
 * between the placement and L, so placed + staged stays within L; physical mode has no margin
 * for it, and hybrid there reads all its host chunks in place). Adds the streamed bytes by class. */
static bool plan_mover(const profile_summary *p, const uint8_t *resident, transit_stream_schedule *out,
                       uint64_t *streamed_by_class, uint64_t *staged_peak)
{
    uint64_t *addr = malloc((p->n + 1) * sizeof *addr);
    uint32_t *issue = malloc((p->n + 1) * sizeof *issue), *back = malloc((p->n + 1) * sizeof *back);
    bool ok = addr && issue && back;
    for (size_t i = 0; ok && i < p->n; i++)
        addr[i] = p->chunks[i] << TRANSIT_CHUNK_SHIFT;
    transit_stream_input in = {.nphases = p->nphases, .touch_offsets = p->touch_offsets, .touch = p->touch,
                               .compute_ns = p->phase_kernel_ns, .nchunks = p->n, .chunk_addr = addr,
                               .resident = resident,
                               .staging_bytes = TRANSIT_HYBRID_STAGING(transit_g.cfg.mem_limit),
                               .htod_bps = TRANSIT_STREAM_HTOD_BPS, .dtoh_bps = TRANSIT_STREAM_DTOH_BPS,
                               .first_ordinal = p->phase_ordinal};
    ok = ok && transit_stream_plan(&in, issue, back, staged_peak) == 0 &&
         transit_stream_schedule_make(&in, issue, back, out) == 0;
    for (size_t i = 0; ok && i < p->n; i++)
        if (issue[i] != TRANSIT_STREAM_NONE)
            streamed_by_class[hyb_reuse_class(p->reuse[i])] += TRANSIT_CHUNK_BYTES;
    free(addr);
    free(issue);
    free(back);
    return ok;
}

/* Under hp.lock: a placement (and its mover's schedule) takes the current one's place. */
static void install_locked(uint64_t *chunk, uint32_t *reuse, uint8_t *resident, size_t n,
                           transit_stream_schedule schedule)
{
    transit_stream_schedule_free(&hp.schedule);
    hp.schedule = schedule;
    free(hp.chunk);
    free(hp.reuse);
    free(hp.resident);
    hp.chunk = chunk;
    hp.reuse = reuse;
    hp.resident = resident;
    hp.nchunks = n;
}

/* A new plan replaces the last; `apply`: the tick applies it (else it waits for the guard). */
void hyb_plan(const profile_summary *p, bool apply)
{
    static int warned, warned_mover;
    size_t n = p->n;
    uint8_t *resident = malloc(n + 1);
    uint64_t by_class[3][TRANSIT_HYBRID_CLASSES] = {{0}}, staged_peak = 0;
    transit_stream_schedule schedule = {0};
    uint64_t *chunk = malloc((n + 1) * sizeof *chunk);
    uint32_t *reuse = malloc((n + 1) * sizeof *reuse);
    bool ok = resident && chunk && reuse && transit_hybrid_place(p->reuse, n, placement_capacity(), resident) == 0;
    if (ok) {
        memcpy(chunk, p->chunks, n * sizeof *chunk);
        memcpy(reuse, p->reuse, n * sizeof *reuse);
    }
    for (size_t i = 0; ok && i < n; i++)
        by_class[resident[i] ? 0 : 1][hyb_reuse_class(p->reuse[i])] += TRANSIT_CHUNK_BYTES;
    if (ok && n && transit_limit_mode() && transit_g.cfg.hybrid_mover && p->nphases &&
        !plan_mover(p, resident, &schedule, by_class[2], &staged_peak)) {
        if (!__atomic_exchange_n(&warned_mover, 1, __ATOMIC_RELAXED))
            transit_warn("hybrid: out of memory for its mover's plan; host chunks are read in place");
        transit_stream_schedule_free(&schedule);
        memset(by_class[2], 0, sizeof by_class[2]);
    }
    if (!ok || !n) {
        free(chunk);
        free(reuse);
        free(resident);
        chunk = NULL;
        reuse = NULL;
        resident = NULL;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            transit_warn("hybrid: %s; acting as advise", n ? "out of memory for its placement" : "the profile has no chunk");
        n = 0;
    }
    pthread_mutex_lock(&hp.lock);
    install_locked(chunk, reuse, resident, n, schedule);
    for (int k = 0; k < TRANSIT_HYBRID_CLASSES; k++) {
        __atomic_store_n(&pol.n.hybrid_resident_by_reuse[k], by_class[0][k], __ATOMIC_RELAXED);
        __atomic_store_n(&pol.n.hybrid_host_by_reuse[k], by_class[1][k], __ATOMIC_RELAXED);
        __atomic_store_n(&pol.n.hybrid_streamed_by_reuse[k], by_class[2][k], __ATOMIC_RELAXED);
    }
    __atomic_store_n(&pol.n.planned_streamed_bytes, schedule.streamed_bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&pol.n.planned_staged_peak, staged_peak, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&hp.lock);
    transit_add(&pol.n.hybrid_plans, 1);
    if (apply)
        hyb_set_due();
}

bool hyb_due(void)
{
    return __atomic_load_n(&hp.due, __ATOMIC_ACQUIRE);
}

void hyb_set_due(void)
{
    __atomic_store_n(&hp.due, 1, __ATOMIC_RELEASE);
}

/* A device chunk already there stays as its warm-up left it, brought back by faults in small
 * pieces. TRANSIT_HYBRID_REMAP sends it to the host and back in bulk, a chunk at a time on one
 * stream (design-notes.md, "Hybrid at micro-batch 8"). The training runs meanwhile: a kernel that
 * touches a chunk between the two prefetches faults it in again, counted in the faults. */
static void place_on_device(const transit_driver_api *drv, transit_range r, CUdevice dev, CUstream stream)
{
    if (!transit_g.cfg.hybrid_remap) {
        pol_prefetch_range(drv, r, dev, PREFETCH_PLACE_DEVICE, stream);
        return;
    }
    for (uint64_t at = r.addr, end = r.addr + r.bytes; at < end; at += TRANSIT_CHUNK_BYTES) {
        transit_range step = {.addr = at, .bytes = TRANSIT_MIN(TRANSIT_CHUNK_BYTES, end - at)};
        pol_prefetch_range(drv, step, dev, PREFETCH_REMAP, stream);
        pol_prefetch_range(drv, step, dev, PREFETCH_PLACE_DEVICE, stream);
    }
}

/* Any thread, at an iteration mark: a profiled run reads where the placed chunks are at the next
 * tick (design-notes.md, "Hybrid at micro-batch 8": with SetAccessedBy a chunk on the host is
 * read in place with no fault, so only the page tables show a device chunk left there). */
void hyb_mark(void)
{
    if (transit_g.cfg.profile && transit_get(&pol.n.hybrid_applied))
        __atomic_store_n(&hp.reading_due, 1, __ATOMIC_RELEASE);
}

/* -1 when a read failed: a failure must not read as "nothing on the host". */
static int64_t host_bytes_of(int fd, const transit_range *r, size_t n)
{
    int64_t host = 0;
    for (size_t i = 0; r && i < n && host >= 0; i++) {
        int64_t h = transit_host_bytes_in(fd, r[i].addr, r[i].bytes);
        host = h < 0 ? -1 : host + h;
    }
    return host;
}

/* Tick thread: the reading hyb_mark asked for, outside the lock (a walk of the page
 * tables of every placed chunk). */
void hyb_read_placement(void)
{
    if (!__atomic_exchange_n(&hp.reading_due, 0, __ATOMIC_ACQ_REL))
        return;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t nhost = 0, ndevice = 0;
    transit_range *host, *device;
    placed_halves(&host, &nhost, &device, &ndevice);
    int64_t device_on_host = host_bytes_of(fd, device, ndevice), host_on_host = host_bytes_of(fd, host, nhost);
    close(fd);
    if (device_on_host >= 0 && host_on_host >= 0) {
        __atomic_store_n(&pol.n.placed_device_on_host_bytes, (uint64_t)device_on_host, __ATOMIC_RELAXED);
        __atomic_store_n(&pol.n.placed_host_on_host_bytes, (uint64_t)host_on_host, __ATOMIC_RELAXED);
        transit_add(&pol.n.placement_readings, 1);
    }
    free(host);
    free(device);
}

/* Tick thread. Waits for its moves (off the launch path): the next readings then show them. The
 * mover's schedule goes to `handed`. False when no placement was due. */
bool hyb_apply(const transit_driver_api *drv, CUdevice dev, CUstream stream, transit_stream_schedule *handed)
{
    static int warned;
    if (!__atomic_exchange_n(&hp.due, 0, __ATOMIC_ACQ_REL))
        return false;
    pol_in_place_all(drv, dev); /* once: later allocations are advised as they come */
    size_t nhost = 0, ndevice = 0;
    transit_range *host, *device;
    placed_halves(&host, &nhost, &device, &ndevice);
    for (size_t i = 0; host && i < nhost && !__atomic_load_n(&pol.stopping, __ATOMIC_ACQUIRE); i++)
        pol_prefetch_range(drv, host[i], dev, PREFETCH_PLACE_HOST, stream);
    for (size_t i = 0; device && i < ndevice && !__atomic_load_n(&pol.stopping, __ATOMIC_ACQUIRE); i++)
        place_on_device(drv, device[i], dev, stream);
    free(host);
    free(device);
    CUresult e = transit_act_stream_wait(drv, stream);
    if (e != CUDA_SUCCESS)
        transit_warn_once(&warned, "hybrid: cuStreamSynchronize after placing", drv, e);
    transit_add(&pol.n.hybrid_applied, 1);
    /* The placement is in: in limit mode it holds the device as advise's full fill does (only
     * smaps readings decide; one over L demotes, see hyb_demote), with or without the mover,
     * which takes over here. */
    pthread_mutex_lock(&hp.lock);
    *handed = hp.schedule;
    hp.schedule = (transit_stream_schedule){0};
    pthread_mutex_unlock(&hp.lock);
    if (transit_limit_mode() && e == CUDA_SUCCESS)
        pol_fill_hold();
    return true;
}

/* Tick thread, while hybrid holds the device: a reading `excess` bytes over the hold's target
 * sends the least reused placed chunks to the host (read in place from then on) instead of
 * evicting by recency, which would end the hold and take what every phase reads. False when
 * nothing placed is left to send (limit mode's eviction then takes over). */
bool hyb_demote(const transit_driver_api *drv, CUstream stream, uint64_t excess)
{
    size_t want = (size_t)((excess + TRANSIT_CHUNK_BYTES - 1) >> TRANSIT_CHUNK_SHIFT), m = 0, nranges = 0, cap = 0;
    transit_range *ranges = NULL;
    pthread_mutex_lock(&hp.lock);
    size_t *picked = hp.resident ? malloc((want + 1) * sizeof *picked) : NULL; /* none unless hybrid placed */
    if (picked)
        m = transit_hybrid_demote(hp.reuse, hp.nchunks, excess, hp.resident, picked, want);
    if (m)
        qsort(picked, m, sizeof *picked, by_index); /* address order: neighbours coalesce */
    bool ok = true;
    for (size_t k = 0; k < m; k++) {
        int c = hyb_reuse_class(hp.reuse[picked[k]]);
        transit_sub(&pol.n.hybrid_resident_by_reuse[c], TRANSIT_CHUNK_BYTES);
        transit_add(&pol.n.hybrid_host_by_reuse[c], TRANSIT_CHUNK_BYTES);
        ok = ok && add_chunk(&ranges, &nranges, &cap, hp.chunk[picked[k]]);
    }
    pthread_mutex_unlock(&hp.lock); /* no lock across driver calls */
    for (size_t i = 0; ok && i < nranges; i++)
        pol_prefetch_range(drv, ranges[i], 0, PREFETCH_DEMOTE, stream);
    free(picked);
    free(ranges);
    return m > 0;
}

/* A copy of the placement's chunks and their reuse, with room for where each is; false when
 * there are none or memory ran out (what was allocated is the caller's to free). */
bool hyb_copy_chunks(uint64_t **chunk, uint32_t **reuse, uint8_t **resident, size_t *n)
{
    pthread_mutex_lock(&hp.lock);
    *n = hp.nchunks;
    *chunk = malloc((*n + 1) * sizeof **chunk);
    *reuse = malloc((*n + 1) * sizeof **reuse);
    *resident = malloc(*n + 1);
    bool ok = *chunk && *reuse && *resident && *n;
    if (ok) {
        memcpy(*chunk, hp.chunk, *n * sizeof **chunk);
        memcpy(*reuse, hp.reuse, *n * sizeof **reuse);
    }
    pthread_mutex_unlock(&hp.lock);
    return ok;
}

/* The guard's revert: advise's placement as read (the chunks and reuse it was read for) takes
 * this one's place and is due; the by-reuse counters follow, and the mover's schedule is
 * dropped (it gets an empty one: it stops). */
void hyb_take_placement(uint64_t *chunk, uint32_t *reuse, uint8_t *resident, size_t n)
{
    uint64_t by_class[2][TRANSIT_HYBRID_CLASSES] = {{0}};
    pthread_mutex_lock(&hp.lock);
    install_locked(chunk, reuse, resident, n, (transit_stream_schedule){0});
    for (size_t i = 0; i < hp.nchunks; i++)
        by_class[hp.resident[i] ? 0 : 1][hyb_reuse_class(hp.reuse[i])] += TRANSIT_CHUNK_BYTES;
    for (int k = 0; k < TRANSIT_HYBRID_CLASSES; k++) {
        __atomic_store_n(&pol.n.hybrid_resident_by_reuse[k], by_class[0][k], __ATOMIC_RELAXED);
        __atomic_store_n(&pol.n.hybrid_host_by_reuse[k], by_class[1][k], __ATOMIC_RELAXED);
        __atomic_store_n(&pol.n.hybrid_streamed_by_reuse[k], 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&pol.n.planned_streamed_bytes, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pol.n.planned_staged_peak, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&hp.lock);
    hyb_set_due();
}

void hyb_place_after_fork(void)
{
    free(hp.chunk);
    free(hp.reuse);
    free(hp.resident);
    transit_stream_schedule_free(&hp.schedule);
    memset(&hp, 0, sizeof hp);
    pthread_mutex_init(&hp.lock, NULL);
}
