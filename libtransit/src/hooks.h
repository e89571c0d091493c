/* hooks.h - lookup of TRANSIT's replacement for a CUDA symbol. */
#ifndef TRANSIT_HOOKS_H
#define TRANSIT_HOOKS_H

/* TRANSIT's hook for a driver symbol as cuGetProcAddress names it ("cuMemAlloc" with the
 * requested CUDA version), or NULL when TRANSIT leaves it alone. */
void *transit_driver_hook(const char *symbol, int cuda_version);
/* TRANSIT's hook for an exported symbol name ("cuMemAlloc_v2", "cudaMalloc"), or NULL. */
void *transit_exported_hook(const char *name);

#endif
