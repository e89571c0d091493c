/* stats.c - renders and writes the per-process statistics file, at exit and on SIGTERM/SIGINT.
 * Rendering takes no lock and allocates nothing, so the signal path can use it. */
#include "stats.h"
#include "internal.h"
#include "policy.h"
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATS_BUFFER_BYTES (1u << 20)

static char render_buffer[STATS_BUFFER_BYTES];
static const char *exit_reason_seen = "exit"; /* a signal's name outlives the exit that follows */
static struct sigaction previous_term, previous_int;

void transit_stats_render_identity(jbuf *b)
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

void transit_stats_render_config(jbuf *b)
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

static void render_allocations(jbuf *b)
{
    const transit_counters *n = &transit_g.n;
    int dev = transit_g.id.device >= 0 && transit_g.id.device < TRANSIT_MAX_DEVICES ? transit_g.id.device : 0;
    uint64_t allocs = transit_get(&n->alloc_count), frees = transit_get(&n->free_count);
    jb_printf(b,
              "\"allocations\": {\"count\": %" PRIu64 ", \"frees\": %" PRIu64 ", \"live\": %" PRIu64
              ", \"managed_bytes_total\": %" PRIu64 ", \"managed_bytes_live\": %" PRIu64
              ", \"managed_bytes_peak\": %" PRIu64 ", \"vmm_count\": %" PRIu64 ", \"vmm_bytes\": %" PRIu64
              ", \"refused\": %" PRIu64 ", \"refused_calls\": %" PRIu64 ", \"refused_bytes\": %" PRIu64
              ", \"physical_budget_bytes\": %" PRIu64 "}, ",
              allocs, frees, allocs - frees, transit_get(&n->managed_total), transit_get(&n->managed_live),
              transit_get(&n->managed_peak), transit_get(&n->vmm_count), transit_get(&n->vmm_live),
              transit_get(&n->refused), transit_get(&n->refused_calls), transit_get(&n->refused_bytes),
              transit_g.phys_budget[dev]);
    jb_printf(b, "\"memory\": {\"device_total_bytes\": %" PRIu64 ", ", transit_g.device_total[dev]);
    transit_policy_memory_json(b);
    jb_printf(b, "}, ");
}

void transit_stats_render(jbuf *b, const char *exit_reason)
{
    jb_printf(b, "{\"schema\": \"transit.rank/1\", \"version\": \"%s\", ", TRANSIT_VERSION);
    transit_stats_render_identity(b);
    transit_stats_render_config(b);
    jb_printf(b, "\"cuda_active\": %s, \"cuda_error\": ", transit_g.cuda_active ? "true" : "false");
    jb_str(b, transit_g.cuda_error[0] ? transit_g.cuda_error : NULL);
    jb_printf(b, ", \"time\": {\"start_unix\": %.3f, \"end_unix\": %.3f, \"exit_reason\": ", transit_g.start_unix,
              transit_now());
    jb_str(b, exit_reason);
    jb_printf(b, "}, ");
    render_allocations(b);
    transit_policy_stats_json(b);
    jb_printf(b, "\"warnings\": [");
    for (int i = 0; i < TRANSIT_MIN(transit_g.nwarnings, TRANSIT_MAX_WARNINGS); i++) {
        jb_str(b, transit_g.warnings[i]);
        jb_printf(b, ", ");
    }
    jb_trim_comma(b);
    jb_printf(b, "]}\n");
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

void transit_stats_write(const char *exit_reason)
{
    static int writing;
    char path[sizeof transit_g.cfg.out_dir + 320], tmp[sizeof path + 8];
    jbuf b = {render_buffer, 0, sizeof render_buffer, 0};

    if (!transit_g.active || !transit_g.cfg.out_dir[0] || transit_g.id.pid != getpid())
        return; /* inactive, no output asked for, or a fork child that never used CUDA */
    if (__atomic_exchange_n(&writing, 1, __ATOMIC_ACQUIRE))
        return; /* a signal arrived while the exit path was writing */
    transit_stats_render(&b, exit_reason);
    if (transit_out_path(path, sizeof path, ".json"))
        goto out;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (b.overflow) {
        transit_log("statistics larger than %u bytes; %s not written", STATS_BUFFER_BYTES, path);
        goto out;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        transit_log("cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    size_t done = 0;
    while (done < b.len) {
        ssize_t w = write(fd, b.p + done, b.len - done);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    close(fd);
    if (done != b.len || rename(tmp, path)) {
        transit_log("cannot write %s", path);
        unlink(tmp);
    }
out:
    __atomic_store_n(&writing, 0, __ATOMIC_RELEASE);
}

static void write_at_exit(void)
{
    transit_stats_write(exit_reason_seen);
}

static void on_signal(int sig, siginfo_t *info, void *uctx)
{
    const struct sigaction *prev = sig == SIGTERM ? &previous_term : &previous_int;
    exit_reason_seen = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    transit_stats_write(exit_reason_seen);
    if (prev->sa_flags & SA_SIGINFO) {
        prev->sa_sigaction(sig, info, uctx);
    } else if (prev->sa_handler == SIG_IGN) {
        return;
    } else if (prev->sa_handler != SIG_DFL) {
        prev->sa_handler(sig); /* e.g. Python's: it raises KeyboardInterrupt, exit follows */
    } else {
        sigaction(sig, prev, NULL);
        raise(sig);
    }
}

void transit_stats_install(void)
{
    static int installed;
    struct sigaction sa;
    if (installed)
        return;
    installed = 1;
    atexit(write_at_exit);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &previous_term);
    sigaction(SIGINT, &sa, &previous_int);
}
