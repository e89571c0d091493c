/* cupti_api.c - run-time resolution of libcupti; see cupti_api.h. */
#include "cupti_api.h"
#include "cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define CUPTI_SONAME "libcupti.so.13"

/* Where a toolkit keeps libcupti, tried after the soname and the libcudart directory. */
static const char *const toolkit_paths[] = {
    "/usr/local/cuda/extras/CUPTI/lib64/" CUPTI_SONAME,
    "/usr/local/cuda/lib64/" CUPTI_SONAME,
};

static transit_cupti_api cupti;
static int cupti_state; /* 0 unresolved, 1 ok, -1 unavailable */
static char cupti_why[640];
static char cupti_path[512];
static pthread_once_t cupti_once = PTHREAD_ONCE_INIT;

/* In the pip layout libcupti sits beside libcudart (nvidia/cu13/lib). */
static void *open_beside_cudart(void)
{
    const transit_runtime_api *rt = transit_runtime();
    Dl_info info;
    char path[sizeof cupti_path];
    if (!rt || !dladdr((void *)rt->GetDevice, &info) || !info.dli_fname)
        return NULL;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash)
        return NULL;
    int n = snprintf(path, sizeof path, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, CUPTI_SONAME);
    if (n < 0 || (size_t)n >= sizeof path)
        return NULL;
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* One libcupti per process: a copy already loaded (PyTorch's profiler links one) comes first;
 * then the one beside the application's libcudart, so the pip wheels' versions stay matched;
 * then the loader's search path; then the toolkit. */
static void *open_cupti(void)
{
    void *h = dlopen(CUPTI_SONAME, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = open_beside_cudart();
    if (!h)
        h = dlopen(CUPTI_SONAME, RTLD_NOW | RTLD_LOCAL);
    for (size_t i = 0; !h && i < sizeof toolkit_paths / sizeof toolkit_paths[0]; i++)
        h = dlopen(toolkit_paths[i], RTLD_NOW | RTLD_LOCAL);
    return h;
}

#define RESOLVE(field, sym)                                                                                      \
    do {                                                                                                         \
        cupti.field = (__typeof__(cupti.field))transit_real_dlsym(h, sym);                                      \
        if (!cupti.field && !missing)                                                                            \
            missing = sym;                                                                                       \
    } while (0)

static void load(void)
{
    const char *missing = NULL;
    Dl_info info;
    void *h = open_cupti();
    if (!h) {
        snprintf(cupti_why, sizeof cupti_why,
                 "%s not found (loaded, beside libcudart, by soname, or in /usr/local/cuda)", CUPTI_SONAME);
        cupti_state = -1;
        return;
    }
    cupti.handle = h;
    RESOLVE(Subscribe, "cuptiSubscribe");
    RESOLVE(Unsubscribe, "cuptiUnsubscribe");
    RESOLVE(EnableCallback, "cuptiEnableCallback");
    RESOLVE(ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks");
    RESOLVE(ActivityEnable, "cuptiActivityEnable");
    RESOLVE(ActivityDisable, "cuptiActivityDisable");
    RESOLVE(ActivityFlushAll, "cuptiActivityFlushAll");
    RESOLVE(ActivityGetNextRecord, "cuptiActivityGetNextRecord");
    RESOLVE(ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords");
    RESOLVE(ActivityPushExternalCorrelationId, "cuptiActivityPushExternalCorrelationId");
    RESOLVE(ActivityPopExternalCorrelationId, "cuptiActivityPopExternalCorrelationId");
    RESOLVE(ActivityConfigureUnifiedMemoryCounter, "cuptiActivityConfigureUnifiedMemoryCounter");
    RESOLVE(GetResultString, "cuptiGetResultString");
    RESOLVE(Finalize, "cuptiFinalize");
    if (dladdr((void *)cupti.Subscribe, &info) && info.dli_fname)
        snprintf(cupti_path, sizeof cupti_path, "%s", info.dli_fname);
    if (missing) { /* kept open: unloading a library another component may share is not worth it */
        snprintf(cupti_why, sizeof cupti_why, "%s lacks %s", cupti_path[0] ? cupti_path : CUPTI_SONAME, missing);
        cupti_state = -1;
        return;
    }
    cupti_state = 1;
}

const transit_cupti_api *transit_cupti(const char **why)
{
    pthread_once(&cupti_once, load);
    if (why)
        *why = cupti_state > 0 ? NULL : cupti_why;
    return cupti_state > 0 ? &cupti : NULL;
}

int transit_cupti_probe(char *out, size_t cap)
{
    const char *why;
    const transit_cupti_api *api = transit_cupti(&why);
    if (cap)
        snprintf(out, cap, "%s", api ? cupti_path : why);
    return api ? 0 : -1;
}

const char *transit_cupti_error(CUptiResult r)
{
    static __thread char unknown[32];
    const char *s = NULL;
    if (cupti_state > 0 && cupti.GetResultString && cupti.GetResultString(r, &s) == CUPTI_SUCCESS && s)
        return s;
    snprintf(unknown, sizeof unknown, "CUPTI error %d", (int)r);
    return unknown;
}
