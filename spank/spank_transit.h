/*
 * spank_transit.h - shared by the SPANK plugin's source files (one per SPANK context).
 *
 * The plugin keeps two pieces of state per process: the administrator's configuration from
 * plugstack.conf (struct transit_conf) and the user's options (struct transit_opts). Option
 * values are validated by libtransit's own transit_task_env(), the function `transit run`
 * uses, so the plugin never has rules of its own for policies or sizes.
 */
#ifndef SPANK_TRANSIT_H
#define SPANK_TRANSIT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include <slurm/spank.h>

#define TRANSIT_ERR_MAX 512      /* one error line */
#define TRANSIT_WORD_MAX 64      /* a policy or size value */
#define TRANSIT_OFF "off"        /* --transit=off: explicitly no TRANSIT */
#define TRANSIT_JOBID_SUFFIX_MAX 16 /* "/<jobid>/" that the task appends to the report directory */

/* plugstack.conf arguments: set by the administrator only. */
struct transit_conf {
    char lib[PATH_MAX];         /* lib=: absolute path of libtransit.so */
    char hook_dir[PATH_MAX];    /* hook_dir=: default <dir of lib>/../pyhook */
    char report_dir[PATH_MAX];  /* report_dir=: default report directory */
    char policy[TRANSIT_WORD_MAX]; /* policy=: what a bare --transit means; "" = libtransit's default */
};

/* What the user asked for with --transit, --transit-mem-limit and --transit-report-dir. */
struct transit_opts {
    bool requested;             /* --transit was given (with any value, including off) */
    bool off;                   /* --transit=off */
    char policy[TRANSIT_WORD_MAX];  /* "" = the plugstack default */
    char mem_limit[TRANSIT_WORD_MAX]; /* "" = physical mode */
    char report_dir[PATH_MAX];  /* "" = the plugstack default */
};

extern struct transit_conf transit_conf;
extern struct transit_opts transit_opts;

/* args.c: parses plugstack.conf arguments into `conf`; 0, or -1 with a message in err. */
int transit_conf_parse(struct transit_conf *conf, int ac, char **av, char *err, size_t errlen);

/* options.c: the option table and its callbacks (SPANK's signature, so they can be fuzzed). */
extern struct spank_option transit_option_table[];
int transit_opt_policy(int val, const char *optarg, int remote);
int transit_opt_mem_limit(int val, const char *optarg, int remote);
int transit_opt_report_dir(int val, const char *optarg, int remote);
void transit_opts_reset(struct transit_opts *opts);

/* options.c: checks the options against libtransit's rules; 0, or -1 with a message in err. */
int transit_opts_check(const struct transit_opts *opts, const struct transit_conf *conf, char *err,
                       size_t errlen);
/* The policy a task gets: the user's, else plugstack's policy=, else NULL (libtransit's default). */
const char *transit_effective_policy(const struct transit_opts *opts, const struct transit_conf *conf);
/* The report directory a task gets: the user's, else plugstack's report_dir=, else NULL. */
const char *transit_effective_report_dir(const struct transit_opts *opts, const struct transit_conf *conf);

/* One context each; the dispatcher in plugin.c calls them. */
int transit_init(spank_t sp, int ac, char **av);            /* init.c */
int transit_local_post_opt(spank_t sp);                     /* local.c */
int transit_task_init(spank_t sp);                          /* task.c */

#endif /* SPANK_TRANSIT_H */
