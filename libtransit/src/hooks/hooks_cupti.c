/* hooks_cupti.c - the CUPTI entry points through which another tool takes CUPTI. CUPTI has one
 * subscriber and one pair of activity buffer callbacks per process; torch.profiler's Kineto
 * subscribes when a profile starts and registers its own buffers. Before either call reaches
 * CUPTI, TRANSIT's recorder gives CUPTI up (transit_recorder_yield): the tool then works as if
 * TRANSIT were not there, and TRANSIT goes on degraded.
 *
 * cuptiSubscribe_v2 (CUDA 13; NVIDIA recommends it over cuptiSubscribe) is caught alike.
 *
 * Only calls the dynamic loader resolves are caught (Kineto's are: undefined dynamic symbols of
 * libtorch_cpu.so): not dlsym lookups, where a handle or RTLD_NEXT says which library is meant. */
#include "cupti_api.h"
#include "cuda_api.h"
#include "recorder.h"

#include <dlfcn.h>

#define HOOK __attribute__((visibility("default")))

/* The definition of `name` the caller would have reached without libtransit; NULL when none.
 * First in the caller's own dependencies (a libcupti loaded RTLD_LOCAL, as torch's is, is not in
 * the global scope, and a second copy, such as CUDA 12's, may be loaded), then the next one after
 * libtransit in the global scope, then the copy the recorder uses. Never `self`: a lookup from
 * the main program searches the global scope, where libtransit comes first. */
static void *callers_cupti(const char *name, const void *caller, const void *self)
{
    Dl_info info;
    void *sym = NULL, *h;
    const transit_cupti_api *api;
    if (dladdr(caller, &info) && info.dli_fname && (h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD))) {
        sym = transit_real_dlsym(h, name);
        dlclose(h);
    }
    if (!sym || sym == self)
        sym = transit_real_dlsym(RTLD_NEXT, name);
    if ((!sym || sym == self) && (api = transit_cupti(NULL)))
        sym = transit_real_dlsym(api->handle, name);
    return sym == self ? NULL : sym;
}

/* What both hooks do before the call: find the caller's definition and, when there is one, make
 * the recorder give CUPTI up. */
static void *take_over(const char *name, const void *caller, const void *self)
{
    void *real = callers_cupti(name, caller, self);
    if (real)
        transit_recorder_yield(name);
    return real;
}

HOOK CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback, void *userdata)
{
    CUptiResult (*real)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *) =
        (__typeof__(real))take_over("cuptiSubscribe", __builtin_return_address(0), (void *)cuptiSubscribe);
    return real ? real(subscriber, callback, userdata) : CUPTI_ERROR_NOT_INITIALIZED;
}

HOOK CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback, void *userdata,
                                   CUpti_SubscriberParams *params)
{
    CUptiResult (*real)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *, CUpti_SubscriberParams *) =
        (__typeof__(real))take_over("cuptiSubscribe_v2", __builtin_return_address(0), (void *)cuptiSubscribe_v2);
    return real ? real(subscriber, callback, userdata, params) : CUPTI_ERROR_NOT_INITIALIZED;
}

HOOK CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                CUpti_BuffersCallbackCompleteFunc completed)
{
    CUptiResult (*real)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) =
        (__typeof__(real))take_over("cuptiActivityRegisterCallbacks", __builtin_return_address(0),
                                    (void *)cuptiActivityRegisterCallbacks);
    return real ? real(requested, completed) : CUPTI_ERROR_NOT_INITIALIZED;
}
