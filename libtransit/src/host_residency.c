/* host_residency.c - see host_residency.h. */
#include "host_residency.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UVM_PATH " /dev/nvidia-uvm"
#define READ_STEP (256u << 10)
#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_BATCH 512 /* entries per read: 2 MiB of 4 KiB pages, one chunk */

/* A mapping's first line starts with its address range: hex digits, then '-'. */
static int is_mapping_header(const char *line)
{
    const char *p = line;
    while ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))
        p++;
    return p > line && *p == '-';
}

TRANSIT_INTERNAL int64_t transit_uvm_host_rss_parse(const char *smaps)
{
    int64_t total = -1;
    int in_uvm = 0;
    size_t path_len = strlen(UVM_PATH);
    for (const char *line = smaps; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (is_mapping_header(line)) {
            while (len && line[len - 1] == ' ') /* smaps pads short lines */
                len--;
            in_uvm = len >= path_len && memcmp(line + len - path_len, UVM_PATH, path_len) == 0;
            if (in_uvm && total < 0)
                total = 0;
        } else if (in_uvm && strncmp(line, "Rss:", 4) == 0) {
            total += strtoll(line + 4, NULL, 10) * 1024;
        }
        if (!eol)
            break;
        line = eol + 1;
    }
    return total;
}

int64_t transit_uvm_host_rss(void)
{
    static char *buf; /* kept between calls: smaps of a training process is a few MB */
    static size_t cap;
    size_t len = 0;
    int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    for (;;) {
        if (cap - len < READ_STEP + 1) {
            char *grown = realloc(buf, cap + READ_STEP * 4);
            if (!grown) {
                close(fd);
                return -1;
            }
            buf = grown;
            cap += READ_STEP * 4;
        }
        ssize_t r = read(fd, buf + len, READ_STEP);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    return transit_uvm_host_rss_parse(buf);
}

TRANSIT_INTERNAL int64_t transit_statm_rss_parse(const char *statm, uint64_t page_bytes)
{
    char *end;
    strtoull(statm, &end, 10); /* size */
    if (end == statm)
        return -1;
    const char *rss = end;
    unsigned long long pages = strtoull(rss, &end, 10);
    if (end == rss)
        return -1;
    return (int64_t)(pages * page_bytes);
}

int64_t transit_process_rss(void)
{
    char text[256];
    ssize_t n;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    do
        n = read(fd, text, sizeof text - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return -1;
    text[n] = '\0';
    return transit_statm_rss_parse(text, (uint64_t)sysconf(_SC_PAGESIZE));
}

static int pagemap_fd = -1;
static uint64_t page_bytes;

static void open_pagemap(void)
{
    long page = sysconf(_SC_PAGESIZE);
    page_bytes = page > 0 ? (uint64_t)page : 4096;
    pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
}

TRANSIT_INTERNAL int64_t transit_host_present_bytes(uint64_t addr, uint64_t bytes)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    uint64_t entry[PAGEMAP_BATCH];
    pthread_once(&once, open_pagemap);
    if (pagemap_fd < 0)
        return -1;
    uint64_t first = addr / page_bytes, end = (addr + bytes + page_bytes - 1) / page_bytes, present = 0;
    for (uint64_t page = first; page < end;) {
        size_t want = (size_t)TRANSIT_MIN(end - page, (uint64_t)PAGEMAP_BATCH);
        ssize_t got = pread(pagemap_fd, entry, want * sizeof entry[0], (off_t)(page * sizeof entry[0]));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0 || got % (ssize_t)sizeof entry[0])
            return -1;
        for (size_t i = 0; i < (size_t)got / sizeof entry[0]; i++)
            present += (entry[i] & PAGEMAP_PRESENT) != 0;
        page += (uint64_t)got / sizeof entry[0];
    }
    /* Whole pages: the range's partial first and last pages count whole when present. */
    return (int64_t)TRANSIT_MIN(present * page_bytes, bytes);
}
