/* stats.c - writes the statistics file (render.c renders it): atomically, at exit, on a signal,
 * and every TRANSIT_STATS_INTERVAL seconds while the process runs. */
#include "internal.h"
#include "state.h"
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATS_BUFFER_BYTES (1u << 20)

static char render_buffer[STATS_BUFFER_BYTES];
static int writing, final_written;
static double next_refresh; /* recorder thread only */

void transit_stats_write(const char *exit_reason)
{
    char path[sizeof transit_g.cfg.out_dir + 320], tmp[sizeof path + 8];
    jbuf b = {render_buffer, 0, sizeof render_buffer, 0};

    if (!transit_g.active || !transit_g.cfg.out_dir[0] || transit_g.id.pid != getpid())
        return; /* inactive, no output asked for, or a fork child that never used CUDA */
    if (__atomic_load_n(&final_written, __ATOMIC_ACQUIRE) || __atomic_exchange_n(&writing, 1, __ATOMIC_ACQUIRE))
        return; /* the final document is out, or another write runs (a signal during the exit path) */
    transit_stats_render(&b, exit_reason);
    if (transit_out_path(path, sizeof path, ".json"))
        goto out;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (b.overflow) {
        transit_log("statistics larger than %u bytes; %s not written", STATS_BUFFER_BYTES, path);
        goto out;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || fchmod(fd, transit_out_file_mode()) < 0) {
        if (fd >= 0)
            close(fd);
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
    if (exit_reason)
        __atomic_store_n(&final_written, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&writing, 0, __ATOMIC_RELEASE);
}

void transit_stats_refresh(void)
{
    unsigned interval = transit_g.cfg.stats_interval_s;
    double now = transit_now();
    if (!interval || !transit_g.active)
        return;
    if (!next_refresh)
        next_refresh = transit_g.start_unix + interval;
    if (now < next_refresh)
        return;
    next_refresh = now + interval;
    transit_stats_write(NULL);
}
