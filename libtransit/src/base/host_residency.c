/* host_residency.c - see host_residency.h. */
#include "host_residency.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UVM_PATH " /dev/nvidia-uvm"
#define READ_STEP (256u << 10)

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

TRANSIT_INTERNAL int64_t transit_host_bytes_in(int fd, uint64_t addr, uint64_t bytes)
{
    enum { ENTRIES = 512 }; /* a 2 MiB chunk of 4 KiB pages per read */
    uint64_t entry[ENTRIES], page = (uint64_t)sysconf(_SC_PAGESIZE);
    int64_t host = 0;
    for (uint64_t p = addr / page, end = (addr + bytes + page - 1) / page; p < end;) {
        size_t want = (size_t)TRANSIT_MIN((uint64_t)ENTRIES, end - p);
        ssize_t r = pread(fd, entry, want * sizeof *entry, (off_t)(p * sizeof *entry));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || r % (ssize_t)sizeof *entry)
            return -1;
        for (size_t k = 0; k < (size_t)r / sizeof *entry; k++)
            host += (entry[k] >> 63) ? (int64_t)page : 0; /* bit 63: present in RAM */
        p += (size_t)r / sizeof *entry;
    }
    return host;
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
