/* hooks_cupti.c - the CUPTI entry points through which another tool takes CUPTI. CUPTI has one
 * subscriber and one pair of activity buffer callbacks per process; torch.profiler's Kineto
 * subscribes when a profile starts and registers its own buffers. Before either call reaches
 * CUPTI, TRANSIT's recorder gives CUPTI up (transit_recorder_yield): the tool then works as if
 * TRANSIT were not there, and TRANSIT goes on degraded. */
#include "cupti_api.h"
#include "cuda_api.h"
#include "recorder.h"

#include <dlfcn.h>

#define HOOK __attribute__((visibility("default")))

/* The application's definition: the next one after ours in the global scope, else the copy the
 * recorder uses (transit_cupti prefers a copy already loaded: a libcupti loaded RTLD_LOCAL, as
 * Python loads torch's, is not in the global scope). NULL when neither exists. */
static void *application_cupti(const char *name)
{
    void *sym = transit_real_dlsym(RTLD_NEXT, name);
    const transit_cupti_api *api;
    if (sym || !(api = transit_cupti(NULL)))
        return sym;
    return transit_real_dlsym(api->handle, name);
}

HOOK CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback, void *userdata)
{
    CUptiResult (*real)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *) =
        (__typeof__(real))application_cupti("cuptiSubscribe");
    if (!real)
        return CUPTI_ERROR_NOT_INITIALIZED;
    transit_recorder_yield("cuptiSubscribe");
    return real(subscriber, callback, userdata);
}

HOOK CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                CUpti_BuffersCallbackCompleteFunc completed)
{
    CUptiResult (*real)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) =
        (__typeof__(real))application_cupti("cuptiActivityRegisterCallbacks");
    if (!real)
        return CUPTI_ERROR_NOT_INITIALIZED;
    transit_recorder_yield("cuptiActivityRegisterCallbacks");
    return real(requested, completed);
}
