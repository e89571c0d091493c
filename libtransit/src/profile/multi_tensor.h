/* multi_tensor.h - PyTorch's multi-tensor kernels (foreach ops, fused optimizers) in the
 * profile's aggregation (profile_build.c): they split a tensor list over launches, and a tensor cut
 * between two launches has its base pointer in both. Pure: no CUDA, no global state. */
#ifndef TRANSIT_MULTI_TENSOR_H
#define TRANSIT_MULTI_TENSOR_H

#include "profile_data.h"

#include <stdbool.h>
#include <stddef.h>

/* The multi-tensor launches' pointers, sorted by launch and address, malloc'd into *out (NULL and
 * n 0 when there are none); -1 when out of memory. */
int transit_multi_tensor_refs(const profile_input *in, profile_ref **out, size_t *n);

/* Whether r was also held by the launch just before its own, of the same kernel, among the
 * multi-tensor pointers (mt, nmt: transit_multi_tensor_refs): a cut tensor's tail. */
bool transit_carried_over(const profile_input *in, const profile_ref *mt, size_t nmt, const profile_ref *r);

#endif
