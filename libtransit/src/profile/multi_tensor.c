/* multi_tensor.c - PyTorch's multi-tensor kernels in the profile: a tensor cut between two
 * launches of one such kernel is one use, not two (multi_tensor.h). Pure. */
#include "multi_tensor.h"

#include <stdlib.h>
#include <string.h>

/* PyTorch's multi-tensor kernels (foreach ops, fused optimizers) split a tensor list over
 * launches; a tensor cut between two launches has its base pointer in both (design-notes.md,
 * "Multi-tensor kernels"). */
#define MULTI_TENSOR_KERNEL "multi_tensor_apply_kernel"

static int by_launch_addr(const void *a, const void *b)
{
    const profile_ref *x = a, *y = b;
    if (x->launch != y->launch)
        return (x->launch > y->launch) - (x->launch < y->launch);
    return (x->addr > y->addr) - (x->addr < y->addr);
}

/* The multi-tensor launches' pointers, sorted by launch and address (n 0 when there are none). */
int transit_multi_tensor_refs(const profile_input *in, profile_ref **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    bool *multi = calloc(in->nnames + 1, sizeof *multi); /* per kernel name, decided once */
    if (!multi)
        return -1;
    for (uint64_t k = 0; k < in->nnames; k++)
        multi[k] = in->names[k] && strstr(in->names[k], MULTI_TENSOR_KERNEL);
    int rc = 0;
    for (uint64_t i = 0; i < in->nrefs && !rc; i++) {
        const profile_ref *r = &in->refs[i];
        uint32_t name = r->launch < in->nlaunches ? in->launches[r->launch].name : UINT32_MAX;
        if (name >= in->nnames || !multi[name])
            continue;
        if (!*out && !(*out = malloc(in->nrefs * sizeof **out)))
            rc = -1;
        else
            (*out)[(*n)++] = *r;
    }
    free(multi);
    if (*n)
        qsort(*out, *n, sizeof **out, by_launch_addr);
    return rc;
}

/* A pointer that the launch just before r's, of the same kernel, also held among the multi-tensor
 * pointers (so both launches are multi-tensor): the tail of a tensor cut between the two. */
bool transit_carried_over(const profile_input *in, const profile_ref *mt, size_t nmt, const profile_ref *r)
{
    if (!nmt || !r->launch)
        return false;
    const profile_launch *l = &in->launches[r->launch], *prev = &in->launches[r->launch - 1];
    if (prev->name != l->name || prev->iteration != l->iteration || prev->ordinal + 1 != l->ordinal)
        return false;
    profile_ref key = {.addr = r->addr, .launch = r->launch - 1};
    return bsearch(&key, mt, nmt, sizeof *mt, by_launch_addr) != NULL;
}
