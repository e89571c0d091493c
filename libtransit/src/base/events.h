/* events.h - what the recorder tells the layers above it, and what they ask of it: the recorder
 * delivers events to a sink (wired in lifecycle.c) and reads a demand word (set by the policies),
 * so it never calls the policies, and the feedback loop between them (the policies decide what
 * CUPTI collects; records drive the policies) stays one-way in the code. */
#ifndef TRANSIT_EVENTS_H
#define TRANSIT_EVENTS_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

/* One kernel launch, seen at API entry on the launching thread, before the kernel is queued. */
typedef struct transit_launch {
    CUstream stream;    /* the launch's stream; CU_STREAM_PER_THREAD for a _ptsz launch on stream 0 */
    uint64_t iteration; /* the iteration count at the launch */
    uint32_t ordinal;   /* launches before this one in the same iteration */
    uint32_t corr, runtime_corr; /* CUPTI correlation ids its kernel record may carry (0: none) */
    const char *symbol;          /* the kernel's name, as CUPTI gives it */
    CUfunction function;
    void **params, **extra; /* the launch's arguments, as cuLaunchKernel takes them */
} transit_launch;

typedef enum { TRANSIT_MIGRATION_HTOD, TRANSIT_MIGRATION_DTOH, TRANSIT_GPU_FAULT, TRANSIT_REMOTE_MAP } transit_um_kind;

/* One unified memory counter record: bytes migrated or mapped, or for a fault its fault groups. */
typedef struct transit_um_record {
    transit_um_kind kind;
    uint64_t start_ns, addr, value;
    bool evicted_by_driver; /* a DtoH the driver chose (cause EVICTION), not TRANSIT */
} transit_um_record;

/* A profiling window: the warm-up's (and a re-profile's) full one, which the policies plan from;
 * a one-iteration refinement of it; or the one steady iteration TRANSIT_PROFILE_STEADY asks for,
 * observed and written, never planned from. */
typedef enum { TRANSIT_WINDOW_FULL, TRANSIT_WINDOW_REFINE, TRANSIT_WINDOW_STEADY } transit_window_kind;

/* The sink. Threads: launch on launching threads; kernel and um_record on CUPTI's buffer thread
 * (or any flushing thread); profile_begin, profile_end and iteration on the recorder's thread or
 * the thread that noticed an iteration mark. */
typedef struct transit_sink {
    void (*launch)(const transit_launch *l);
    /* A kernel record: GPU times and its launch's ordinal (UINT32_MAX outside the window). */
    void (*kernel)(uint32_t corr, uint64_t start_ns, uint64_t end_ns, uint32_t ordinal);
    void (*um_record)(const transit_um_record *r);
    /* A profiling window of `kind` opens at iteration `first`, and ends after its records were
     * flushed (max_launches: most launches in one of its iterations; timed: it took kernel
     * times); the end says whether another refinement is worth its time. A steady window has no
     * profile_end: nothing decides from it. */
    void (*profile_begin)(uint64_t first, transit_window_kind kind);
    bool (*profile_end)(uint32_t max_launches, bool timed);
    /* After profile_end (or a steady window's end), outside the recorder's locks (slow work may
     * go here). */
    void (*window_closed)(void);
    /* The iteration count moved to `iteration` (launches: in the one that ended). */
    void (*iteration)(uint64_t iteration, uint32_t launches);
} transit_sink;

/* The demand word: what the policies need of the recorder now (transit_recorder_demand()). */
enum {
    TRANSIT_DEMAND_PROFILE = 1u << 0,       /* a changed kernel sequence calls for a new profile */
    TRANSIT_DEMAND_KERNEL_TIMES = 1u << 1,  /* a profile places migrations by kernel times */
    TRANSIT_DEMAND_LAUNCHES = 1u << 2,      /* the policies still act at launches */
    TRANSIT_DEMAND_NEAR_LIMIT = 1u << 3,    /* limit mode near L: migration records drive the estimate */
    TRANSIT_DEMAND_FAR_UNDER = 1u << 4,     /* nothing can be evicted yet: CUPTI may detach */
    TRANSIT_DEMAND_PLANS_AT_LAUNCHES = 1u << 5, /* refinement windows are worth their iterations */
    TRANSIT_DEMAND_EVERY_RECORD = 1u << 6,  /* a window's end flushes the buffer still filling too */
};

#endif
