/* actions.h - every CUDA call TRANSIT makes for itself (not the application's, which the hooks
 * pass on): prefetches and advice, its own streams, the device context, and the capture guard.
 * Nothing TRANSIT issues may land on a capturing stream, and its own calls run in relaxed capture
 * mode so that a capture elsewhere cannot make them fail. */
#ifndef TRANSIT_ACTIONS_H
#define TRANSIT_ACTIONS_H

#include "cuda_api.h"

#include <stdbool.h>
#include <stdint.h>

/* The driver with the calls the policies need (cuMemPrefetchAsync_v2, cuMemAdvise_v2, CUDA 12.2+);
 * NULL, with one warning, when it lacks them. */
const transit_driver_api *transit_act_driver(void);
/* Whether work queued on `stream` would be captured into a graph. A failed query counts as
 * capturing: leaving a stream alone is always safe, acting on a capturing one breaks its graph. */
bool transit_act_capturing(const transit_driver_api *drv, CUstream stream);
/* Relaxed capture mode for this thread; restore puts back what the application had. */
bool transit_act_relax_capture(const transit_driver_api *drv, CUstreamCaptureMode *saved);
void transit_act_restore_capture(const transit_driver_api *drv, bool relaxed, CUstreamCaptureMode *saved);
CUresult transit_act_prefetch(const transit_driver_api *drv, uint64_t addr, uint64_t bytes, CUmemLocation to,
                              CUstream stream);
CUresult transit_act_accessed_by(const transit_driver_api *drv, uint64_t addr, uint64_t bytes, CUdevice dev);
/* One of TRANSIT's non-blocking streams, created at first use; false, with one warning for all of
 * them, when the driver cannot create it. */
bool transit_act_own_stream(const transit_driver_api *drv, CUstream *stream);
/* The stream ran everything queued (true too when the driver cannot tell). */
bool transit_act_stream_idle(const transit_driver_api *drv, CUstream stream);
CUresult transit_act_stream_query(const transit_driver_api *drv, CUstream stream);
CUresult transit_act_stream_wait(const transit_driver_api *drv, CUstream stream);
/* Events, for ordering TRANSIT's streams and the application's without waiting on the host
 * (hybrid's mover); has_events: the driver gave all four calls. */
bool transit_act_has_events(const transit_driver_api *drv);
CUresult transit_act_event_create(const transit_driver_api *drv, CUevent *event);
void transit_act_event_destroy(const transit_driver_api *drv, CUevent event);
CUresult transit_act_record(const transit_driver_api *drv, CUevent event, CUstream stream);
CUresult transit_act_wait_event(const transit_driver_api *drv, CUstream stream, CUevent event);
CUresult transit_act_current_device(const transit_driver_api *drv, CUdevice *dev);
/* The calling thread (the tick thread) makes the application's primary context its own, once;
 * false, with one warning, if it cannot. */
bool transit_act_enter_context(const transit_driver_api *drv, int dev);
/* The same for another of TRANSIT's threads (hybrid's mover), which keeps its own once-flag. */
CUresult transit_act_use_primary_context(const transit_driver_api *drv, int dev);
/* One warning per flag for a failed driver call, naming `what` and the error. */
void transit_warn_once(int *flag, const char *what, const transit_driver_api *drv, CUresult r);
void transit_actions_after_fork(void);

#endif
