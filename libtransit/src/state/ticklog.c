/* ticklog.c - see ticklog.h. Each line is formatted whole and written with one write(2) on an
 * O_APPEND descriptor, without stdio: no buffer a fork child inherits can put half a line into
 * the file. */
#include "ticklog.h"
#include "internal.h"
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_BYTES 512

static int fd = -1;
static int gave_up;

/* Appends to line[*len] (a byte count; empty for UINT64_MAX) and a separator. */
static void put_bytes(char *line, size_t *len, uint64_t v, char sep)
{
    int n = v == UINT64_MAX ? snprintf(line + *len, LINE_BYTES - *len, "%c", sep)
                            : snprintf(line + *len, LINE_BYTES - *len, "%" PRIu64 "%c", v, sep);
    if (n > 0)
        *len = TRANSIT_MIN(*len + (size_t)n, (size_t)LINE_BYTES - 1);
}

static void write_line(const char *line, size_t len)
{
    while (len) {
        ssize_t w = write(fd, line, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        line += w;
        len -= (size_t)w;
    }
}

static int open_log(void)
{
    static const char header[] = "t_s,planning,fill_state,sweep_due,estimate_bytes,bound_bytes,smaps_bound_bytes,"
                                 "over_asked_bytes,over_bytes,evicted_bytes,swept_bytes,htod_bytes,dtoh_bytes,"
                                 "managed_bytes,work_ms\n";
    char path[sizeof transit_g.cfg.out_dir + 320];
    if (transit_out_path(path, sizeof path, ".ticks.csv"))
        return -1; /* transit_out_path said why */
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0 && fchmod(fd, transit_out_file_mode()) < 0) {
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        transit_warn("TRANSIT_TICK_LOG: cannot write %s: %s; no tick log", path, strerror(errno));
        return -1;
    }
    write_line(header, sizeof header - 1);
    return 0;
}

void transit_ticklog_write(const transit_tick *t)
{
    char line[LINE_BYTES];
    size_t len = 0;
    if (!transit_g.cfg.tick_log || gave_up || (fd < 0 && (gave_up = open_log() != 0)))
        return;
    int n = snprintf(line, sizeof line, "%.3f,%d,%s,%d,", t->t_s, t->planning, t->fill_state, t->sweep_due);
    len = n > 0 ? (size_t)n : 0;
    put_bytes(line, &len, t->estimate, ',');
    put_bytes(line, &len, t->bound, ',');
    put_bytes(line, &len, t->smaps_bound, ',');
    put_bytes(line, &len, t->over_asked, ',');
    put_bytes(line, &len, t->over, ',');
    put_bytes(line, &len, t->evicted, ',');
    put_bytes(line, &len, t->swept, ',');
    put_bytes(line, &len, t->htod, ',');
    put_bytes(line, &len, t->dtoh, ',');
    put_bytes(line, &len, t->managed, ',');
    n = snprintf(line + len, sizeof line - len, "%.3f\n", t->work_ms);
    len += n > 0 ? (size_t)n : 0;
    write_line(line, TRANSIT_MIN(len, sizeof line - 1));
}

/* The descriptor is the parent's (O_CLOEXEC keeps it from exec'd programs): the child writes its
 * own file. */
void transit_ticklog_after_fork(void)
{
    if (fd >= 0)
        close(fd);
    fd = -1;
    gave_up = 0;
}
