/*
 * transit.h - the public C API of libtransit.
 *
 * libtransit is preloaded (LD_PRELOAD) into every task of a job; applications need not
 * call anything here. These functions exist for three callers:
 *   - training code that wants to mark iteration boundaries itself (transit_mark_iteration);
 *   - tools that read live statistics (transit_stats_json);
 *   - the `transit run` command and the Slurm plugin, which both build a task's environment
 *     with transit_task_env() so that the two can never disagree.
 * All functions are thread-safe. Strings returned are owned by the caller unless noted.
 */
#ifndef TRANSIT_H
#define TRANSIT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRANSIT_API __attribute__((visibility("default")))

/* Library version, e.g. "0.1.0". Static storage. */
TRANSIT_API const char *transit_version(void);

/* Marks the end of a training iteration (after the optimizer step). Cheap; no CUDA call. */
TRANSIT_API void transit_mark_iteration(void);

/* The current statistics as a JSON document (schema "transit.rank/1").
 * Returns a malloc'd string; release it with transit_free(). */
TRANSIT_API char *transit_stats_json(void);
TRANSIT_API void transit_free(void *p);

/* What a task asks for: the user-facing options, plus where libtransit and the Python
 * iteration hook live and the task's current LD_PRELOAD / PYTHONPATH (NULL when unset). */
typedef struct transit_task_request {
    const char *policy;     /* "base" | "prefetch" | "advise"; NULL means "base" */
    const char *mem_limit;  /* a size such as "40G"; NULL means physical mode */
    const char *out_dir;    /* where per-rank stats files go; NULL means none */
    const char *lib_path;   /* absolute path of libtransit.so */
    const char *hook_dir;   /* directory holding the Python iteration hook; NULL: none */
    const char *ld_preload; /* the task's LD_PRELOAD before TRANSIT, or NULL */
    const char *pythonpath; /* the task's PYTHONPATH before TRANSIT, or NULL */
} transit_task_request;

#define TRANSIT_TASK_ENV_MAX 8

typedef struct transit_env_var {
    const char *name; /* static storage */
    char *value;      /* malloc'd; freed by transit_task_env_free() */
} transit_env_var;

/* Validates the request and fills `vars` with the environment the task must get
 * (LD_PRELOAD with libtransit first, PYTHONPATH with the hook first, TRANSIT_*).
 * Returns the number of variables (<= TRANSIT_TASK_ENV_MAX), or -1 with a one-line
 * message in `err` naming the bad value and what is allowed. */
TRANSIT_API int transit_task_env(const transit_task_request *req, transit_env_var *vars,
                                 char *err, size_t errlen);
TRANSIT_API void transit_task_env_free(transit_env_var *vars, int n);

#ifdef __cplusplus
}
#endif
#endif /* TRANSIT_H */
