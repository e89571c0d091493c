/* task_env.c - the environment a TRANSIT task gets. One function, used by both `transit run`
 * (through cffi) and the SPANK plugin (compiled in), so the two can never disagree. */
#include "config.h"
#include "internal.h"
#include "transit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "entry" or "entry:existing"; unchanged when entry already comes first. */
static char *prepend_entry(const char *entry, const char *existing)
{
    size_t n = strlen(entry);
    char *out;
    if (!existing || !*existing)
        return strdup(entry);
    if (strncmp(existing, entry, n) == 0 && (existing[n] == '\0' || existing[n] == ':' || existing[n] == ' '))
        return strdup(existing);
    out = malloc(n + 1 + strlen(existing) + 1);
    if (out)
        sprintf(out, "%s:%s", entry, existing);
    return out;
}

static int add_var(transit_env_var *vars, int *n, const char *name, char *value)
{
    if (!value)
        return -1;
    vars[*n].name = name;
    vars[*n].value = value;
    (*n)++;
    return 0;
}

TRANSIT_API int transit_task_env(const transit_task_request *req, transit_env_var *vars, char *err,
                                 size_t errlen)
{
    transit_policy policy = TRANSIT_POLICY_BASE;
    uint64_t limit;
    int n = 0;

    /* the callers check their options first, naming them as the user typed them; these are the
     * variables the task gets */
    if (req->policy && transit_parse_policy("TRANSIT_POLICY", req->policy, &policy, err, errlen))
        return -1;
    if (req->mem_limit && transit_parse_size("TRANSIT_MEM_LIMIT", req->mem_limit, &limit, err, errlen))
        return -1;
    if (!req->lib_path || req->lib_path[0] != '/') {
        snprintf(err, errlen, "library path '%.200s' is not absolute; libtransit must be named by an absolute path",
                 req->lib_path ? req->lib_path : "");
        return -1;
    }
    if (req->out_dir && !*req->out_dir) {
        snprintf(err, errlen, "report directory is empty; give a directory path");
        return -1;
    }

    if (add_var(vars, &n, "LD_PRELOAD", prepend_entry(req->lib_path, req->ld_preload)))
        goto oom;
    if (req->hook_dir && add_var(vars, &n, "PYTHONPATH", prepend_entry(req->hook_dir, req->pythonpath)))
        goto oom;
    if (add_var(vars, &n, "TRANSIT_POLICY", strdup(transit_policy_name(policy))))
        goto oom;
    if (req->mem_limit && add_var(vars, &n, "TRANSIT_MEM_LIMIT", strdup(req->mem_limit)))
        goto oom;
    if (req->out_dir && add_var(vars, &n, "TRANSIT_OUT", strdup(req->out_dir)))
        goto oom;
    return n;
oom:
    transit_task_env_free(vars, n);
    snprintf(err, errlen, "out of memory building the task environment");
    return -1;
}

TRANSIT_API void transit_task_env_free(transit_env_var *vars, int n)
{
    for (int i = 0; i < n; i++) {
        free(vars[i].value);
        vars[i].value = NULL;
    }
}
