/* hist.c - migration size histogram; see hist.h for the bin boundaries. */
#include "hist.h"

#include <stdio.h>

#define KIB 1024ull
#define MIB (1024ull * KIB)

static const char *const bin_labels[TRANSIT_HIST_BINS] = {"<4K", "4K-64K", "64K-1M", "1M-2M", ">2M"};

int transit_hist_bin(uint64_t bytes)
{
    if (bytes < 4 * KIB)
        return 0;
    if (bytes < 64 * KIB)
        return 1;
    if (bytes < 1 * MIB)
        return 2;
    if (bytes <= 2 * MIB)
        return 3;
    return 4;
}

const char *transit_hist_label(int bin)
{
    return bin >= 0 && bin < TRANSIT_HIST_BINS ? bin_labels[bin] : "?";
}

void transit_hist_add(transit_hist *h, uint64_t bytes)
{
    int bin = transit_hist_bin(bytes);
    h->count[bin]++;
    h->bytes[bin] += bytes;
}

int transit_hist_json(const transit_hist *h, transit_hist_field field, char *buf, size_t cap)
{
    const uint64_t *values = field == TRANSIT_HIST_BYTES ? h->bytes : h->count;
    size_t len = 0;
    if (cap == 0)
        return -1;
    for (int bin = 0; bin < TRANSIT_HIST_BINS; bin++) {
        int n = snprintf(buf + len, cap - len, "%s\"%s\": %llu%s", bin == 0 ? "{" : "", bin_labels[bin],
                         (unsigned long long)values[bin], bin == TRANSIT_HIST_BINS - 1 ? "}" : ", ");
        if (n < 0 || (size_t)n >= cap - len) {
            buf[0] = '\0';
            return -1;
        }
        len += (size_t)n;
    }
    return (int)len;
}
