/*
 * spank_transit.h - shared by the SPANK plugin's source files (one per SPANK context).
 *
 * The plugin keeps three pieces of state per process: the administrator's configuration from
 * plugstack.conf (struct transit_conf), the user's options (struct transit_opts) and, in
 * slurmstepd, what the step gets (struct transit_step). Values are validated by libtransit's own
 * rules (config.c, compiled in), the ones `transit run` and libtransit itself use, so the plugin
 * never has rules of its own for policies, sizes or TRANSIT_* variables.
 */
#ifndef SPANK_TRANSIT_H
#define SPANK_TRANSIT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <slurm/spank.h>

#define TRANSIT_ERR_MAX 1024     /* one error line */
#define TRANSIT_WORD_MAX 64      /* a policy or size value */
#define TRANSIT_OFF "off"        /* --transit=off: explicitly no TRANSIT */
#define TRANSIT_JOB_DIR_MODE 0700 /* <report_dir>/<jobid>/ unless plugstack.conf says report_dir_mode= */

/* plugstack.conf arguments: set by the administrator only. */
struct transit_conf {
    char lib[PATH_MAX];         /* lib=: absolute path of libtransit.so (required) */
    char hook_dir[PATH_MAX];    /* hook_dir=: default <dir of lib>/../pyhook when that exists */
    char report_dir[PATH_MAX];  /* report_dir=: the site's report directory; "" = none */
    char policy[TRANSIT_WORD_MAX]; /* policy=: what a bare --transit means; "" = libtransit's default */
    mode_t job_dir_mode;        /* report_dir_mode=: mode of each job's directory */
};

/* Where a value of the user's options came from (srun, sbatch, salloc), weakest first, as Slurm
 * ranks them for every option: the job's options (in the environment) override sbatch's script, the
 * command line overrides both. An off leaves the weaker values of the other options unused. */
enum transit_source {
    TRANSIT_FROM_SCRIPT,       /* sbatch: an #SBATCH line of the script */
    TRANSIT_FROM_JOB,          /* the job's option (sbatch/salloc), inherited by a command run in it */
    TRANSIT_FROM_COMMAND_LINE, /* this command's own; in slurmstepd, what srun forwarded */
};

/* What the user asked for with --transit, --transit-mem-limit and --transit-report-dir. */
struct transit_opts {
    bool requested;             /* --transit was given (with any value, including off) */
    bool off;                   /* --transit=off */
    char policy[TRANSIT_WORD_MAX];  /* "" = a bare --transit */
    char mem_limit[TRANSIT_WORD_MAX]; /* "" = not given */
    char report_dir[PATH_MAX];  /* "" = not given: the site's report_dir= */
    enum transit_source off_from, mem_limit_from, report_dir_from; /* of the values given */
};

/* In slurmstepd: what this step gets, worked out once per node (step.c), used by task.c. */
struct transit_step {
    bool active;                /* a job step that asked for TRANSIT */
    uint32_t job_id, step_id;
    uid_t uid;
    gid_t gid;
    const char *policy;         /* NULL: libtransit's default */
    const char *mem_limit;      /* NULL: physical mode */
    char job_dir[PATH_MAX];     /* <report_dir>/<jobid>/, "" = no report directory */
    char error[TRANSIT_ERR_MAX]; /* set when the step cannot run; every task reports it */
    bool env_refused;           /* error is about the job's environment: the step file records it */
};

extern struct transit_conf transit_conf;
extern struct transit_opts transit_opts;
extern struct transit_step transit_step;

/* args.c: parses plugstack.conf arguments into `conf` (syntax only), then checks what they name
 * on this host (files, directories) and derives hook_dir= when it is not given; 0, or -1 with a
 * message in err. */
int transit_conf_parse(struct transit_conf *conf, int ac, char **av, char *err, size_t errlen);
int transit_conf_check(struct transit_conf *conf, char *err, size_t errlen);

/* elf.c: 1 when the ELF shared object in buf defines the function `sym`, 0 when it does not,
 * -1 when buf is not a 64-bit ELF shared object of this machine's byte order. */
int transit_elf_defines(const unsigned char *buf, size_t len, const char *sym);

/* options.c: the option table and its callbacks (SPANK's signature, so they can be fuzzed). */
extern struct spank_option transit_option_table[];
void transit_options_init(void);
int transit_opt_policy(int val, const char *optarg, int remote);
int transit_opt_mem_limit(int val, const char *optarg, int remote);
int transit_opt_report_dir(int val, const char *optarg, int remote);
void transit_opts_reset(struct transit_opts *opts);
/* This process's command line (srun's, sbatch's): NUL-separated words, read once; *len 0 when it
 * cannot be read. */
const char *transit_command_line(size_t *len);
/* --transit followed by a policy as the next word: refused (srun, sbatch); sbatch: --transit=help.
 * `before_script`: sbatch, which reads only the words before its script. 0, or -1 (refused). */
int transit_check_command_line(bool before_script);
/* One line for a value the user gave; in srun/sbatch/salloc the command then exits. Returns -1. */
int transit_refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The policy a task gets: the option, else the task's TRANSIT_POLICY, else plugstack's policy=,
 * else NULL (libtransit's default). */
const char *transit_effective_policy(const struct transit_opts *opts, const char *env_policy,
                                     const struct transit_conf *conf);
/* The report directory a task gets: the option, else plugstack's report_dir=, else NULL. */
const char *transit_effective_report_dir(const struct transit_opts *opts, const struct transit_conf *conf);

/* task.c: the job's or task's value of `name` in *out (malloc'd, NULL when unset); the buffer
 * grows until the whole value fits. 0, or -1 on failure. */
int transit_getenv_alloc(spank_t sp, const char *name, char **out);

/* local.c: sbatch found SLURM_EXPORT_ENV set when it started (init.c records it), so that variable
 * does not tell the --export sbatch worked out. */
extern bool transit_export_env_preset;

/* One function per context; the dispatcher in plugin.c calls them. */
int transit_init(spank_t sp, int ac, char **av);            /* init.c */
int transit_local_post_opt(spank_t sp);                     /* local.c */
int transit_local_user_init(spank_t sp);                    /* local.c: srun, at its step's launch */
int transit_local_exit(spank_t sp);                         /* local.c: srun, after its step */
int transit_step_post_opt(spank_t sp);                      /* step.c: slurmstepd, as root */
int transit_step_user_init(spank_t sp);                     /* step.c: slurmstepd, as the user */
int transit_task_init(spank_t sp);                          /* task.c */

#endif /* SPANK_TRANSIT_H */
