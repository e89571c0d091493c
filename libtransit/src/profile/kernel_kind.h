/* kernel_kind.h - what a kernel's name says about how it reads its operands, for the profile's
 * aggregation (profile_build.c). Pure: no CUDA, no global state. */
#ifndef TRANSIT_KERNEL_KIND_H
#define TRANSIT_KERNEL_KIND_H

#include "internal.h"

#include <stdbool.h>

/* Whether the kernel is a GEMM or an attention kernel (cuBLAS's nvjet, CUTLASS, cuDNN's flash
 * SDPA, ...): it reads an operand again for every output tile, so an operand read in place can
 * cross PCIe many times per launch, where an elementwise kernel reads it once. */
TRANSIT_INTERNAL bool transit_kernel_rereads(const char *name);

#endif
