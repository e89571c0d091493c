/* state.c - see state.h. */
#include "state.h"
#include "cuda_api.h"
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <sys/stat.h>

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

void transit_state_init(void)
{
    transit_g.start_unix = transit_now();
    read_identity(&transit_g.id);
}

void transit_state_after_fork(void)
{
    memset(&transit_g.n, 0, sizeof transit_g.n);
    memset(transit_g.phys_budget, 0, sizeof transit_g.phys_budget);
    transit_g.cuda_active = 0;
    transit_g.cuda_error[0] = '\0';
    cuda_error_noted = device_noted = 0;
    __atomic_store_n(&transit_g.active, 0, __ATOMIC_RELEASE);
}

uint64_t transit_device_bytes(void)
{
    int dev = transit_g.id.device;
    return dev >= 0 && dev < TRANSIT_MAX_DEVICES ? transit_g.device_total[dev] : 0;
}

static int make_dirs(const char *path)
{
    char tmp[sizeof transit_g.cfg.out_dir];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0775) && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, 0775) && errno != EEXIST ? -1 : 0;
}

mode_t transit_out_file_mode(void)
{
    struct stat st;
    /* the directory's read and write bits: 0750 (a site's report_dir_mode=) gives 0640, as the
     * plugin gives the step file; a directory it cannot stat gives the owner's alone */
    return stat(transit_g.cfg.out_dir, &st) == 0 ? (st.st_mode & 0666) : 0600;
}

int transit_out_path(char *path, size_t n, const char *suffix)
{
    const transit_identity *id = &transit_g.id;
    char rank[16];
    if (id->rank >= 0)
        snprintf(rank, sizeof rank, "%d", id->rank);
    else
        snprintf(rank, sizeof rank, "x");
    snprintf(path, n, "%s/rank%s.%s.%d%s", transit_g.cfg.out_dir, rank, id->hostname, (int)id->pid, suffix);
    if (make_dirs(transit_g.cfg.out_dir)) {
        transit_log("cannot create %s: %s", transit_g.cfg.out_dir, strerror(errno));
        return -1;
    }
    return 0;
}

void transit_state_identity_json(jbuf *b)
{
    const transit_identity *id = &transit_g.id;
    jb_printf(b, "\"identity\": {\"job_id\": ");
    jb_str(b, id->job_id[0] ? id->job_id : NULL);
    jb_printf(b, ", \"step_id\": ");
    jb_str(b, id->step_id[0] ? id->step_id : NULL);
    jb_printf(b, ", \"node\": ");
    jb_str(b, id->node);
    jb_printf(b, ", \"hostname\": ");
    jb_str(b, id->hostname);
    jb_printf(b, ", \"rank\": %d, \"local_rank\": %d, \"world_size\": %d, \"pid\": %d, \"device\": %d, ",
              id->rank, id->local_rank, id->world_size, (int)id->pid, id->device);
    jb_printf(b, "\"gpu_uuid\": ");
    jb_str(b, id->gpu_uuid[0] ? id->gpu_uuid : NULL);
    jb_printf(b, ", \"gpu_name\": ");
    jb_str(b, id->gpu_name[0] ? id->gpu_name : NULL);
    jb_printf(b, "}, ");
}

void transit_state_config_json(jbuf *b)
{
    const transit_config *c = &transit_g.cfg;
    jb_printf(b, "\"config\": {\"policy\": \"%s\", \"mode\": \"%s\", \"limit_bytes\": ",
              transit_policy_name(c->policy), c->mem_limit ? "limit" : "physical");
    if (c->mem_limit)
        jb_printf(b, "%" PRIu64, c->mem_limit);
    else
        jb_printf(b, "null");
    jb_printf(b, ", \"warmup_iters\": %u, \"prefetch_gap_bytes\": %" PRIu64 ", \"recorder\": %s}, ",
              c->warmup_iters, c->prefetch_gap, c->recorder ? "true" : "false");
}
