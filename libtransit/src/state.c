/* state.c - activation, identity, warnings, fork handling. */
#include "state.h"
#include "cuda_api.h"
#include "internal.h"
#include "memory.h"
#include "policy.h"
#include "stats.h"
#include "alloc_table.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

transit_state transit_g;
__thread int transit_in_real_call;

static pthread_mutex_t activate_lock = PTHREAD_MUTEX_INITIALIZER;
static int expandable_segments_disabled;

double transit_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t transit_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void transit_raise_peak(uint64_t *peak, uint64_t value)
{
    uint64_t old = __atomic_load_n(peak, __ATOMIC_RELAXED);
    while (value > old && !__atomic_compare_exchange_n(peak, &old, value, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void transit_warn(const char *fmt, ...)
{
    char msg[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    transit_log("%s", msg);
    int i = __atomic_fetch_add(&transit_g.nwarnings, 1, __ATOMIC_RELAXED);
    if (i < TRANSIT_MAX_WARNINGS)
        memcpy(transit_g.warnings[i], msg, sizeof msg);
}

void transit_note_cuda_ok(void)
{
    __atomic_store_n(&transit_g.cuda_active, 1, __ATOMIC_RELAXED);
}

static int cuda_error_noted, device_noted; /* once per process (reset in a fork child) */

void transit_note_cuda_error(const char *name)
{
    if (!__atomic_exchange_n(&cuda_error_noted, 1, __ATOMIC_RELAXED))
        snprintf(transit_g.cuda_error, sizeof transit_g.cuda_error, "%s", name ? name : "unknown CUDA error");
}

void transit_note_device(int device)
{
    const transit_driver_api *drv;
    CUdevice dev;
    CUuuid uuid;
    size_t total = 0;
    if (device < 0 || __atomic_exchange_n(&device_noted, 1, __ATOMIC_RELAXED))
        return;
    transit_g.id.device = device;
    drv = transit_driver();
    if (!drv || !drv->DeviceGet || drv->DeviceGet(&dev, device) != CUDA_SUCCESS)
        return;
    if (drv->DeviceGetName)
        drv->DeviceGetName(transit_g.id.gpu_name, sizeof transit_g.id.gpu_name, dev);
    if (drv->DeviceTotalMem && drv->DeviceTotalMem(&total, dev) == CUDA_SUCCESS && device < TRANSIT_MAX_DEVICES)
        transit_g.device_total[device] = total;
    if (drv->DeviceGetUuid && drv->DeviceGetUuid(&uuid, dev) == CUDA_SUCCESS) {
        const unsigned char *u = (const unsigned char *)uuid.bytes;
        snprintf(transit_g.id.gpu_uuid, sizeof transit_g.id.gpu_uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                 u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    }
}

static int env_int(const char *a, const char *b)
{
    const char *v = getenv(a);
    if (!v && b)
        v = getenv(b);
    return v && *v ? atoi(v) : -1;
}

static void env_copy(char *dst, size_t n, const char *var, const char *fallback)
{
    const char *v = getenv(var);
    snprintf(dst, n, "%s", v && *v ? v : fallback);
}

static void read_identity(transit_identity *id)
{
    gethostname(id->hostname, sizeof id->hostname - 1);
    env_copy(id->job_id, sizeof id->job_id, "SLURM_JOB_ID", "");
    env_copy(id->step_id, sizeof id->step_id, "SLURM_STEP_ID", "");
    env_copy(id->node, sizeof id->node, "SLURMD_NODENAME", id->hostname);
    id->rank = env_int("RANK", "SLURM_PROCID");
    id->local_rank = env_int("LOCAL_RANK", "SLURM_LOCALID");
    id->world_size = env_int("WORLD_SIZE", "SLURM_NTASKS");
    id->pid = getpid();
    id->device = -1;
}

/* In a fork child the parent's CUDA context is unusable: forget it and start over if the
 * child itself calls CUDA (multiprocessing workers, data loaders). */
static void after_fork_child(void)
{
    pthread_mutex_init(&activate_lock, NULL);
    transit_alloc_reset();
    transit_policy_after_fork();
    memset(&transit_g.n, 0, sizeof transit_g.n);
    memset(transit_g.phys_budget, 0, sizeof transit_g.phys_budget);
    transit_g.cuda_active = 0;
    transit_g.cuda_error[0] = '\0';
    cuda_error_noted = device_noted = 0;
    transit_mem_after_fork();
    transit_g.nwarnings = 0;
    __atomic_store_n(&transit_g.active, 0, __ATOMIC_RELEASE);
}

void transit_activate(void)
{
    char err[512];
    pthread_mutex_lock(&activate_lock);
    if (transit_g.active)
        goto out;
    if (transit_config_load(&transit_g.cfg, err, sizeof err)) {
        transit_log("%s", err);
        _exit(1); /* before any CUDA work: never run half-configured */
    }
    transit_g.start_unix = transit_now();
    read_identity(&transit_g.id);
    static int atfork_registered;
    if (!atfork_registered) {
        atfork_registered = 1;
        pthread_atfork(NULL, NULL, after_fork_child);
    }
    if (expandable_segments_disabled)
        transit_warn("PYTORCH_CUDA_ALLOC_CONF: expandable_segments switched off (VMM memory cannot be managed)");
    transit_stats_install();
    if (transit_g.cfg.verbose)
        transit_log("active: policy=%s mode=%s limit=%llu out=%s", transit_policy_name(transit_g.cfg.policy),
                    transit_limit_mode() ? "limit" : "physical", (unsigned long long)transit_g.cfg.mem_limit,
                    transit_g.cfg.out_dir[0] ? transit_g.cfg.out_dir : "(none)");
    __atomic_store_n(&transit_g.active, 1, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&activate_lock);
}

/* PyTorch reads its allocator settings before any CUDA call, so this must happen at load
 * time. Expandable segments allocate through cuMemCreate, which cannot be managed memory. */
static void disable_expandable_segments(const char *var)
{
    static const char key[] = "expandable_segments:";
    const char *v = getenv(var);
    const char *hit;
    size_t value_len;
    if (!v || !(hit = strstr(v, key)))
        return;
    hit += sizeof key - 1;
    if (strncasecmp(hit, "true", 4) == 0)
        value_len = 4;
    else if (*hit == '1')
        value_len = 1;
    else
        return;
    size_t prefix = (size_t)(hit - v);
    const char *suffix = hit + value_len;
    char *out = malloc(prefix + 5 + strlen(suffix) + 1);
    if (!out)
        return;
    memcpy(out, v, prefix);
    memcpy(out + prefix, "False", 5);
    strcpy(out + prefix + 5, suffix);
    setenv(var, out, 1);
    free(out);
    expandable_segments_disabled = 1;
}

__attribute__((constructor)) static void transit_load(void)
{
    disable_expandable_segments("PYTORCH_CUDA_ALLOC_CONF");
    disable_expandable_segments("PYTORCH_ALLOC_CONF");
}
