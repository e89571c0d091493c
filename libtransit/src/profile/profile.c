/* profile.c - the profile's collector and writer (see profile.h).
 *
 * Threads: launching threads (transit_profile_launch), CUPTI's buffer thread (kernel and unified
 * memory records), the recorder's thread (window begin and end) and the exiting thread. One
 * mutex, taken only while the window collects. */
#include "profile.h"
#include "alloc_table.h"
#include "chunks.h"
#include "cuda_api.h"
#include "json.h"
#include "period.h"
#include "state.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CORR_SLOTS (1u << 20)     /* correlation id -> launch, direct-mapped */
#define NAME_SLOTS (1u << 16)     /* kernel-name hash -> name index, open addressing */
#define FUNCTION_SLOTS 4096u      /* CUfunction -> its parameter sizes, direct-mapped */
#define MAX_PARAMS 256u           /* parameters read per kernel */
#define PARAM_POOL (1u << 18)     /* parameter sizes of every cached function */
#define REFS_PER_LAUNCH 1024u     /* managed pointers kept per launch (multi-tensor kernels pass hundreds) */
#define DEDUP_WINDOW 8u           /* a launch's recent pointers, for repeats */
#define MERGE_WINDOW_NS 1000000u  /* one chunk's unified memory records this close are one event */

enum { IDLE, COLLECTING, DONE };

typedef struct function_params {
    void *f;
    uint32_t first, count; /* into param_size */
} function_params;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int state;
    bool steady; /* TRANSIT_PROFILE_STEADY's window: written apart, never planned from */
    uint64_t first;
    uint32_t iterations;
    profile_launch *launches;
    profile_ref *refs;
    profile_event *events;
    uint64_t nlaunches, nrefs, nevents, cap_launches, cap_refs, cap_events;
    uint64_t dropped_launches, dropped_refs, dropped_events;
    uint64_t unread_launches; /* no parameter sizes known for the kernel */
    char *names[PROFILE_MAX_NAMES];
    uint64_t nnames;
    uint32_t name_slot[NAME_SLOTS]; /* name index + 1 */
    uint64_t name_hash[NAME_SLOTS];
    uint64_t *corr;                 /* (corr << 32) | launch */
    function_params fn[FUNCTION_SLOTS];
    uint32_t param_size[PARAM_POOL];
    uint32_t nparam_sizes;
} pf;
/* Bounds of managed memory seen so far: a parameter word outside them is no managed pointer. */
static uint64_t managed_lo = UINT64_MAX, managed_hi;

bool transit_profile_collecting(void)
{
    return __atomic_load_n(&pf.state, __ATOMIC_ACQUIRE) == COLLECTING;
}

void transit_profile_window_begin(uint64_t first, uint32_t iterations, bool steady, bool planned)
{
    if (!transit_g.cfg.profile && !planned)
        return;
    pthread_mutex_lock(&lock);
    /* a policy that plans from the profile re-plans from every new one (the kernel sequence changed) */
    if (pf.state == IDLE || (pf.state == DONE && (steady || planned))) {
        pf.steady = steady;
        pf.first = first;
        pf.iterations = iterations;
        pf.corr = calloc(CORR_SLOTS, sizeof *pf.corr);
        if (pf.corr)
            __atomic_store_n(&pf.state, COLLECTING, __ATOMIC_RELEASE);
        else
            transit_warn("profile: out of memory; no profile is written");
    }
    pthread_mutex_unlock(&lock);
}

void transit_profile_allocated(uint64_t ptr, uint64_t bytes)
{
    uint64_t lo = __atomic_load_n(&managed_lo, __ATOMIC_RELAXED), hi = __atomic_load_n(&managed_hi, __ATOMIC_RELAXED);
    while (ptr < lo && !__atomic_compare_exchange_n(&managed_lo, &lo, ptr, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    while (ptr + bytes > hi &&
           !__atomic_compare_exchange_n(&managed_hi, &hi, ptr + bytes, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* Appends one element to a growing array capped at `max`; false (counted dropped) past it. */
static bool grow(void **v, uint64_t *n, uint64_t *cap, size_t size, uint64_t max, uint64_t *dropped)
{
    if (*n == *cap) {
        uint64_t want = *cap ? 2 * *cap : 4096;
        void *w = *n < max ? realloc(*v, (size_t)TRANSIT_MIN(want, max) * size) : NULL;
        if (!w) {
            (*dropped)++;
            return false;
        }
        *v = w;
        *cap = TRANSIT_MIN(want, max);
    }
    (*n)++;
    return true;
}

/* lock held */
static uint32_t name_index(const char *symbol)
{
    const char *name = symbol ? symbol : "?";
    uint64_t h = transit_period_hash_name(name);
    for (uint32_t i = (uint32_t)h & (NAME_SLOTS - 1);; i = (i + 1) & (NAME_SLOTS - 1)) {
        uint32_t k = pf.name_slot[i];
        if (!k) {
            if (pf.nnames == PROFILE_MAX_NAMES || !(pf.names[pf.nnames] = strdup(name)))
                return 0; /* the first name stands in (counted nowhere: the names only label) */
            pf.name_slot[i] = (uint32_t)++pf.nnames;
            pf.name_hash[i] = h;
            return (uint32_t)pf.nnames - 1;
        }
        if (pf.name_hash[i] == h && strcmp(pf.names[k - 1], name) == 0)
            return k - 1;
    }
}

/* The sizes of f's parameters (cuFuncGetParamInfo, CUDA 12.4+) into sizes[MAX_PARAMS]; how many.
 * A driver call, so never under `lock`: CUPTI's buffer thread takes `lock` while it holds CUPTI's
 * own locks, which a driver call on a launching thread may wait for. */
static uint32_t query_param_sizes(void *f, uint32_t *sizes)
{
    static int warned;
    const transit_driver_api *drv = transit_driver();
    if (!drv || !drv->FuncGetParamInfo) {
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            transit_warn("profile: the driver lacks cuFuncGetParamInfo (CUDA 12.4+); kernels' pointers are not read, "
                         "only migrations and faults place data");
        return 0;
    }
    uint32_t n = 0;
    size_t offset, size;
    bool as_kernel = drv->FuncGetParamInfo((CUfunction)f, 0, &offset, &size) != CUDA_SUCCESS &&
                     drv->KernelGetParamInfo && drv->KernelGetParamInfo((CUkernel)f, 0, &offset, &size) == CUDA_SUCCESS;
    while (n < MAX_PARAMS && (as_kernel ? drv->KernelGetParamInfo((CUkernel)f, n, &offset, &size)
                                        : drv->FuncGetParamInfo((CUfunction)f, n, &offset, &size)) == CUDA_SUCCESS)
        sizes[n++] = (uint32_t)size;
    return n;
}

static function_params *slot_of(void *f)
{
    return &pf.fn[((uintptr_t)f >> 4) % FUNCTION_SLOTS];
}

/* lock held: f's cached parameter sizes, or NULL. */
static const function_params *cached_params(void *f)
{
    const function_params *e = slot_of(f);
    return e->f == f ? e : NULL;
}

/* lock held: caches f's parameter sizes, as many as the pool still holds. */
static void cache_params(void *f, const uint32_t *sizes, uint32_t n)
{
    uint32_t first = pf.nparam_sizes;
    n = TRANSIT_MIN(n, PARAM_POOL - first);
    memcpy(&pf.param_size[first], sizes, n * sizeof *sizes);
    pf.nparam_sizes += n;
    *slot_of(f) = (function_params){.f = f, .first = first, .count = n};
}

/* lock held: the managed pointers among the words of [p, p + bytes). */
static void scan_words(uint32_t launch, const unsigned char *p, size_t bytes, uint32_t *kept)
{
    uint64_t lo = __atomic_load_n(&managed_lo, __ATOMIC_RELAXED), hi = __atomic_load_n(&managed_hi, __ATOMIC_RELAXED);
    for (size_t off = 0; p && off + sizeof(uint64_t) <= bytes && *kept < REFS_PER_LAUNCH; off += sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, p + off, sizeof v);
        if (v < lo || v >= hi)
            continue;
        bool repeat = false;
        for (uint32_t k = 1; k <= TRANSIT_MIN(*kept, DEDUP_WINDOW); k++)
            repeat |= pf.refs[pf.nrefs - k].addr == v;
        if (repeat || !grow((void **)&pf.refs, &pf.nrefs, &pf.cap_refs, sizeof *pf.refs, PROFILE_MAX_REFS,
                            &pf.dropped_refs))
            continue;
        pf.refs[pf.nrefs - 1] = (profile_ref){.addr = v, .launch = launch};
        (*kept)++;
    }
}

/* lock held: cuLaunchKernel's two forms, an array of argument pointers or one packed buffer. */
static void scan_params(uint32_t launch, void *f, void **params, void **extra)
{
    uint32_t kept = 0;
    if (extra) {
        const unsigned char *buf = NULL;
        size_t size = 0;
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 2 * MAX_PARAMS; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
                size = *(const size_t *)extra[i + 1];
        }
        scan_words(launch, buf, size, &kept);
        return;
    }
    const function_params *fp = params && f ? cached_params(f) : NULL;
    if (!fp || !fp->count)
        pf.unread_launches++;
    for (uint32_t i = 0; fp && i < fp->count; i++)
        scan_words(launch, params[i], pf.param_size[fp->first + i], &kept);
}

static void remember_corr(uint32_t corr, uint32_t launch)
{
    if (corr)
        pf.corr[corr & (CORR_SLOTS - 1)] = (uint64_t)corr << 32 | launch;
}

void transit_profile_launch(uint64_t iteration, uint32_t ordinal, uint32_t corr, uint32_t runtime_corr,
                            const char *symbol, void *function, void **params, void **extra)
{
    if (!transit_profile_collecting() || iteration < pf.first || iteration >= pf.first + pf.iterations)
        return;
    pthread_mutex_lock(&lock);
    if (!extra && params && function && !cached_params(function)) {
        pthread_mutex_unlock(&lock);
        uint32_t sizes[MAX_PARAMS], n = query_param_sizes(function, sizes);
        pthread_mutex_lock(&lock);
        if (!cached_params(function))
            cache_params(function, sizes, n);
    }
    if (pf.state == COLLECTING && grow((void **)&pf.launches, &pf.nlaunches, &pf.cap_launches, sizeof *pf.launches,
                                       PROFILE_MAX_LAUNCHES, &pf.dropped_launches)) {
        uint32_t i = (uint32_t)pf.nlaunches - 1;
        pf.launches[i] = (profile_launch){.iteration = (uint32_t)iteration, .ordinal = ordinal,
                                          .name = name_index(symbol)};
        remember_corr(corr, i);
        remember_corr(runtime_corr, i);
        scan_params(i, function, params, extra);
    }
    pthread_mutex_unlock(&lock);
}

void transit_profile_kernel(uint32_t corr, uint64_t start_ns, uint64_t end_ns)
{
    if (!transit_profile_collecting() || !corr)
        return;
    pthread_mutex_lock(&lock);
    if (pf.state == COLLECTING) {
        uint64_t e = pf.corr[corr & (CORR_SLOTS - 1)];
        if ((uint32_t)(e >> 32) == corr && (uint32_t)e < pf.nlaunches) {
            pf.launches[(uint32_t)e].start_ns = start_ns;
            pf.launches[(uint32_t)e].end_ns = end_ns;
        }
    }
    pthread_mutex_unlock(&lock);
}

void transit_profile_event(profile_event_kind kind, uint64_t start_ns, uint64_t addr, uint64_t bytes)
{
    if (!transit_profile_collecting())
        return;
    uint64_t first = addr >> TRANSIT_CHUNK_SHIFT;
    uint32_t chunks = kind == PROFILE_FAULT || !bytes ? 1 : (uint32_t)(((addr + bytes - 1) >> TRANSIT_CHUNK_SHIFT) - first + 1);
    pthread_mutex_lock(&lock);
    profile_event *last = pf.nevents ? &pf.events[pf.nevents - 1] : NULL;
    /* The driver moves a chunk in many small records: one chunk's, back to back within
     * MERGE_WINDOW_NS, are one event (they go to the same phase and chunk). */
    if (pf.state == COLLECTING && last && last->kind == (uint32_t)kind && last->chunks == 1 && chunks == 1 &&
        last->addr >> TRANSIT_CHUNK_SHIFT == first && start_ns >= last->start_ns &&
        start_ns - last->start_ns <= MERGE_WINDOW_NS) {
        last->bytes += bytes;
    } else if (pf.state == COLLECTING && grow((void **)&pf.events, &pf.nevents, &pf.cap_events, sizeof *pf.events,
                                              PROFILE_MAX_EVENTS, &pf.dropped_events)) {
        pf.events[pf.nevents - 1] =
            (profile_event){.start_ns = start_ns, .addr = addr, .bytes = bytes, .kind = kind, .chunks = chunks};
    }
    pthread_mutex_unlock(&lock);
}

static int by_key(const void *a, const void *b)
{
    uint64_t x = ((const transit_alloc *)a)->key, y = ((const transit_alloc *)b)->key;
    return (x > y) - (x < y);
}

/* zlib, resolved at run time as CUDA is (libtransit links nothing it can do without). */
typedef void *(*gzopen_fn)(const char *, const char *);
typedef int (*gzwrite_fn)(void *, const void *, unsigned);
typedef int (*gzclose_fn)(void *);

static int write_gz(const char *path, const char *head, const char *body)
{
    void *z = dlopen("libz.so.1", RTLD_LAZY);
    gzopen_fn zopen = z ? (gzopen_fn)transit_real_dlsym(z, "gzopen") : NULL;
    gzwrite_fn zwrite = z ? (gzwrite_fn)transit_real_dlsym(z, "gzwrite") : NULL;
    gzclose_fn zclose = z ? (gzclose_fn)transit_real_dlsym(z, "gzclose") : NULL;
    void *f = zopen && zwrite && zclose ? zopen(path, "wb6") : NULL;
    int rc = -1;
    if (f) {
        rc = 0;
        for (const char *part[] = {head, body, "}\n"}, **p = part; p < part + 3 && !rc; p++)
            for (size_t done = 0, n = strlen(*p); done < n && !rc;) {
                unsigned take = (unsigned)TRANSIT_MIN(n - done, (size_t)1 << 30);
                rc = zwrite(f, *p + done, take) == (int)take ? 0 : -1;
                done += take;
            }
        rc |= zclose(f) ? -1 : 0;
    }
    if (z)
        dlclose(z);
    return rc;
}

static void free_names(char **names, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        free(names[i]);
}

/* lock held: hands the collected arrays to *in (the caller frees them) and forgets them here. */
static void take_collected(profile_input *in, char ***names)
{
    *in = (profile_input){.launches = pf.launches, .refs = pf.refs, .events = pf.events, .nlaunches = pf.nlaunches,
                          .nrefs = pf.nrefs, .nevents = pf.nevents, .nnames = pf.nnames,
                          .first_iteration = pf.first, .iterations = pf.iterations,
                          .dropped_launches = pf.dropped_launches, .dropped_refs = pf.dropped_refs,
                          .dropped_events = pf.dropped_events, .unread_launches = pf.unread_launches};
    *names = malloc((pf.nnames + 1) * sizeof **names);
    if (*names)
        memcpy(*names, pf.names, pf.nnames * sizeof **names);
    else
        free_names(pf.names, pf.nnames);
    in->names = (const char *const *)*names;
    free(pf.corr);
    memset(&pf, 0, sizeof pf);
}

static profile_alloc *managed_allocations(uint64_t *n)
{
    size_t count = 0;
    transit_alloc *table = transit_alloc_snapshot(TRANSIT_ALLOC_MANAGED, &count);
    profile_alloc *allocs = table ? calloc(count, sizeof *allocs) : NULL;
    if (allocs) {
        qsort(table, count, sizeof *table, by_key);
        for (size_t i = 0; i < count; i++)
            allocs[i] = (profile_alloc){table[i].key, table[i].size};
    }
    free(table);
    *n = allocs ? count : 0;
    return allocs;
}

/* Built outside the lock: launches meanwhile find the window closed and go on. */
void transit_profile_window_end(bool complete, transit_profile_planner plan)
{
    char path[sizeof transit_g.cfg.out_dir + 320], head[2048];
    char **names = NULL;
    profile_input in;
    pthread_mutex_lock(&lock);
    if (pf.state != COLLECTING) {
        pthread_mutex_unlock(&lock);
        return;
    }
    bool steady = pf.steady;
    take_collected(&in, &names);
    __atomic_store_n(&pf.state, DONE, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    profile_alloc *allocs = managed_allocations(&in.nallocs);
    in.allocs = allocs;
    bool planned = plan && !steady;
    profile_summary summary = {0};
    char *body = names ? transit_profile_build(&in, planned ? &summary : NULL) : NULL;
    if (planned) /* the policy's placement comes from the window it profiled */
        plan(&summary);
    transit_profile_summary_free(&summary);
    jbuf h = {head, 0, sizeof head, 0};
    jb_printf(&h, "{\"schema\": \"transit.profile/1\", \"version\": \"%s\", \"complete\": %s, \"steady\": %s, ",
              TRANSIT_VERSION, complete ? "true" : "false", steady ? "true" : "false");
    transit_state_identity_json(&h);
    transit_state_config_json(&h);
    if (!transit_g.cfg.profile || !transit_g.cfg.out_dir[0]) {
        /* collected for hybrid alone: nothing to write */
    } else if (!body || h.overflow) {
        transit_warn("profile: out of memory building it; no profile is written");
    } else if (!transit_out_path(path, sizeof path, steady ? ".steady.profile.json.gz" : ".profile.json.gz")) {
        if (write_gz(path, head, body) || chmod(path, transit_out_file_mode()))
            transit_warn("profile: cannot write %s (zlib missing or the directory not writable)", path);
        else if (transit_g.cfg.verbose)
            transit_log("profile written: %s", path);
    }
    free(body);
    free(allocs);
    free((void *)in.launches);
    free((void *)in.refs);
    free((void *)in.events);
    if (names)
        free_names(names, in.nnames);
    free(names);
}

/* The child's copy of the collected arrays is left behind (the parent owns the originals). */
void transit_profile_after_fork(void)
{
    pthread_mutex_init(&lock, NULL);
    memset(&pf, 0, sizeof pf);
    managed_lo = UINT64_MAX;
    managed_hi = 0;
}
