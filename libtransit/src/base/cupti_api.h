/* cupti_api.h - the CUPTI functions the recorder calls, resolved at run time.
 *
 * libtransit never links against CUPTI: a process that never uses CUDA never loads it, and
 * a machine without it still runs (the recorder is then off, with the reason). */
#ifndef TRANSIT_CUPTI_API_H
#define TRANSIT_CUPTI_API_H

#include <cupti.h>
#include <stddef.h>

#include "internal.h"

typedef struct transit_cupti_api {
    void *handle; /* the libcupti the functions below come from */
    CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
    CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
    CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
    CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
    CUptiResult (*ActivityFlushAll)(uint32_t);
    CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
    CUptiResult (*ActivityPushExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t);
    CUptiResult (*ActivityPopExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t *);
    CUptiResult (*ActivityConfigureUnifiedMemoryCounter)(CUpti_ActivityUnifiedMemoryCounterConfig *, uint32_t);
    CUptiResult (*GetResultString)(CUptiResult, const char **);
    CUptiResult (*Finalize)(void);
} transit_cupti_api;

/* Loads libcupti once (a copy already loaded, then beside the loaded libcudart, then by
 * soname, then the toolkit's usual directories) and resolves every function. NULL when it cannot; `why` then
 * says what was missing. Thread-safe; the answer never changes. */
const transit_cupti_api *transit_cupti(const char **why);
/* For the CPU tests: 0 when libcupti and all its functions were found, else -1; the path
 * loaded (or the reason) goes into `out`. */
TRANSIT_INTERNAL int transit_cupti_probe(char *out, size_t cap);
/* A CUPTI result as text ("CUPTI_ERROR_...", else "CUPTI error N"), never NULL. */
const char *transit_cupti_error(CUptiResult r);

#endif
