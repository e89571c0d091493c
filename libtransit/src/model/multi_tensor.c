/* multi_tensor.c - PyTorch's multi-tensor kernels in the profile: a tensor cut between two
 * launches of one such kernel is one use, not two (multi_tensor.h). Pure. */
#include "multi_tensor.h"

#include <stdlib.h>
#include <string.h>

/* PyTorch's multi-tensor kernels (foreach ops, fused optimizers) split a tensor list over
 * launches; a tensor cut between two launches has its base pointer in both (design-notes.md,
 * "Multi-tensor kernels"). */
#define MULTI_TENSOR_KERNEL "multi_tensor_apply_kernel"

static bool is_multi_tensor(const profile_input *in, uint32_t name)
{
    return name < in->nnames && in->names[name] && strstr(in->names[name], MULTI_TENSOR_KERNEL);
}

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
    for (uint64_t i = 0; i < in->nrefs; i++) {
        const profile_ref *r = &in->refs[i];
        if (r->launch >= in->nlaunches || !is_multi_tensor(in, in->launches[r->launch].name))
            continue;
        if (!*out && !(*out = malloc(in->nrefs * sizeof **out)))
            return -1;
        (*out)[(*n)++] = *r;
    }
    if (*n)
        qsort(*out, *n, sizeof **out, by_launch_addr);
    return 0;
}

/* A multi-tensor launch's pointer that the launch just before it, of the same kernel, also
 * held: the tail of a tensor cut between the two, not a second use. */
bool transit_carried_over(const profile_input *in, const profile_ref *mt, size_t nmt, const profile_ref *r)
{
    const profile_launch *l = &in->launches[r->launch];
    if (!nmt || !r->launch || !is_multi_tensor(in, l->name))
        return false;
    const profile_launch *prev = &in->launches[r->launch - 1];
    if (prev->name != l->name || prev->iteration != l->iteration || prev->ordinal + 1 != l->ordinal)
        return false;
    profile_ref key = {.addr = r->addr, .launch = r->launch - 1};
    return bsearch(&key, mt, nmt, sizeof *mt, by_launch_addr) != NULL;
}
