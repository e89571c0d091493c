/* kernel_kind.c - see kernel_kind.h. */
#include "kernel_kind.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

/* Parts of the kernel names (lower case) of cuBLAS, CUTLASS and cuDNN's GEMM and attention
 * kernels, and of FlashAttention's. */
static const char *const REREADING_MARKS[] = {"nvjet", "gemm", "cutlass", "xmma", "wgmma", "flash", "sdpa", "fmha"};

TRANSIT_INTERNAL bool transit_kernel_rereads(const char *name)
{
    char lower[512];
    size_t n = 0;
    if (!name)
        return false;
    for (; name[n] && n + 1 < sizeof lower; n++)
        lower[n] = (char)tolower((unsigned char)name[n]);
    lower[n] = '\0';
    for (size_t k = 0; k < sizeof REREADING_MARKS / sizeof *REREADING_MARKS; k++)
        if (strstr(lower, REREADING_MARKS[k]))
            return true;
    return false;
}
