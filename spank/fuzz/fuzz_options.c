/*
 * fuzz_options.c - drives the plugin's option callbacks and plugstack.conf parsing directly,
 * with fixed cases (so the harness fails when the rules break) and then random, very long and
 * repeated values. Built with AddressSanitizer by tests/unit/test_spank_fuzz.py; any overrun
 * aborts the run. Usage: spank_fuzz [ITERATIONS [SEED]]
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spank_transit.h"

#define LONG_LEN 100000
#define ALLOC_ENV "SLURM_SPANK__SLURM_SPANK_OPTION_transit_transit"

static unsigned long errors_logged;
static int failures;

/* Slurm's logger, which the callbacks call: formatted (to exercise the format) but not shown. */
void slurm_error(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (strncmp(line, "transit: ", 9) != 0) {
        fprintf(stderr, "FAIL: error line without 'transit: ' prefix: %s\n", line);
        failures++;
    }
    errors_logged++;
}

#define EXPECT(cond)                                                                 \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            failures++;                                                              \
        }                                                                            \
    } while (0)

static void reset(void)
{
    char err[TRANSIT_ERR_MAX];
    char *av[] = {"lib=/opt/transit/lib/libtransit.so", "report_dir=/shared/transit"};
    transit_opts_reset(&transit_opts);
    if (transit_conf_parse(&transit_conf, 2, av, err, sizeof(err)) < 0) {
        fprintf(stderr, "FAIL: valid plugstack arguments rejected: %s\n", err);
        exit(1);
    }
}

static void fixed_cases(void)
{
    char err[TRANSIT_ERR_MAX];
    char *longval = malloc(LONG_LEN + 1);
    memset(longval, 'G', LONG_LEN);
    longval[LONG_LEN] = '\0';

    reset();
    EXPECT(!strcmp(transit_conf.hook_dir, "/opt/transit/lib/../pyhook"));
    EXPECT(transit_opt_policy(0, "advise", 0) == 0 && !strcmp(transit_opts.policy, "advise"));
    EXPECT(transit_opt_policy(0, "fast", 0) < 0 && !strcmp(transit_opts.policy, "advise"));
    EXPECT(transit_opt_policy(0, "", 0) < 0 && transit_opts.requested);
    EXPECT(transit_opt_policy(0, "off", 0) == 0 && transit_opts.off);
    EXPECT(transit_opt_policy(0, NULL, 0) == 0 && !transit_opts.off && !transit_opts.policy[0]);
    EXPECT(transit_opt_policy(0, longval, 0) < 0);
    EXPECT(transit_opt_policy(0, "(null)", 0) < 0);
    setenv(ALLOC_ENV, "(null)", 1); /* what sbatch exports for a bare --transit */
    EXPECT(transit_opt_policy(0, "(null)", 0) == 0 && !transit_opts.policy[0]);
    unsetenv(ALLOC_ENV);
    EXPECT(transit_opt_policy(0, "", 1) == 0);
    /* slurmstepd records what srun forwarded; the task's transit_task_env() call refuses it */
    EXPECT(transit_opt_policy(0, "fast", 1) == 0 && !strcmp(transit_opts.policy, "fast"));
    EXPECT(transit_opts_check(&transit_opts, &transit_conf, err, sizeof(err)) < 0);
    EXPECT(transit_opt_policy(0, "base", 0) == 0);
    EXPECT(transit_opt_mem_limit(0, "40G", 0) == 0 && !strcmp(transit_opts.mem_limit, "40G"));
    EXPECT(transit_opt_mem_limit(0, "12Q", 0) < 0 && !strcmp(transit_opts.mem_limit, "40G"));
    EXPECT(transit_opt_mem_limit(0, "", 0) < 0);
    EXPECT(transit_opt_mem_limit(0, longval, 0) < 0);
    EXPECT(transit_opt_report_dir(0, "relative", 0) < 0);
    EXPECT(transit_opt_report_dir(0, "/r", 0) == 0 && !strcmp(transit_opts.report_dir, "/r"));
    longval[0] = '/';
    EXPECT(transit_opt_report_dir(0, longval, 0) < 0 && !strcmp(transit_opts.report_dir, "/r"));
    EXPECT(transit_opts_check(&transit_opts, &transit_conf, err, sizeof(err)) == 0);

    /* Lengths at the edge of each buffer: the longest value that fits is kept whole, one more
     * character is refused and changes nothing. */
    char edge[TRANSIT_WORD_MAX + 1];
    memset(edge, '0', sizeof(edge));
    memcpy(edge + TRANSIT_WORD_MAX - 4, "40G", 4); /* 63 characters: a valid size */
    EXPECT(transit_opt_mem_limit(0, edge, 0) == 0 && !strcmp(transit_opts.mem_limit, edge));
    memset(edge, '0', sizeof(edge));
    memcpy(edge + TRANSIT_WORD_MAX - 3, "40G", 4); /* 64 characters */
    EXPECT(transit_opt_mem_limit(0, edge, 0) < 0 && strlen(transit_opts.mem_limit) == TRANSIT_WORD_MAX - 1);
    EXPECT(transit_opt_policy(0, edge, 0) < 0);

    char *bad[] = {"lib=relative.so"};
    EXPECT(transit_conf_parse(&transit_conf, 1, bad, err, sizeof(err)) < 0);
    char *unknown[] = {"lib=/x/libtransit.so", "colour=blue"};
    EXPECT(transit_conf_parse(&transit_conf, 2, unknown, err, sizeof(err)) < 0);
    char *site[] = {"lib=/x/lib/libtransit.so", "policy=prefetch", "hook_dir=/x/hook"};
    EXPECT(transit_conf_parse(&transit_conf, 3, site, err, sizeof(err)) == 0);
    EXPECT(!strcmp(transit_conf.hook_dir, "/x/hook"));
    transit_opts_reset(&transit_opts);
    EXPECT(transit_opt_policy(0, NULL, 0) == 0);
    EXPECT(!strcmp(transit_effective_policy(&transit_opts, &transit_conf), "prefetch"));
    EXPECT(transit_opt_policy(0, "advise", 0) == 0);
    EXPECT(!strcmp(transit_effective_policy(&transit_opts, &transit_conf), "advise"));
    char *bad_policy[] = {"lib=/x/lib/libtransit.so", "policy=fast"};
    EXPECT(transit_conf_parse(&transit_conf, 2, bad_policy, err, sizeof(err)) == 0);
    transit_opts_reset(&transit_opts);
    EXPECT(transit_opts_check(&transit_opts, &transit_conf, err, sizeof(err)) < 0); /* init refuses it */
    char *user_lib[] = {"policy=advise"}; /* no lib=: every use of --transit fails, clearly */
    EXPECT(transit_conf_parse(&transit_conf, 1, user_lib, err, sizeof(err)) == 0);
    EXPECT(transit_opt_policy(0, "base", 0) < 0);
    free(longval);
}

static unsigned long long rng_state;
static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)((rng_state >> 33) % n);
}

/* A random value: mostly plausible pieces (digits, units, policy names, paths), sometimes raw
 * bytes, sometimes very long. */
static char *random_value(void)
{
    static const char *const pieces[] = {"base", "prefetch", "advise", "off", "(null)", "40", "1.5", "G",
                                         "T", "K", "iB", "/", "..", "e308", "-", "=", " ", "%s", "%n",
                                         "0x1p9", "inf", "nan", ":"};
    /* lengths at the edges of the plugin's buffers, where off-by-one errors live */
    static const size_t edges[] = {TRANSIT_WORD_MAX - 1, TRANSIT_WORD_MAX, TRANSIT_WORD_MAX + 1,
                                   PATH_MAX - 33, PATH_MAX - 32, PATH_MAX - 1, PATH_MAX, PATH_MAX + 1};
    size_t cap = rnd(8) == 0 ? LONG_LEN : 1 + rnd(PATH_MAX + 64);
    size_t target = rnd(4) == 0 ? edges[rnd(sizeof(edges) / sizeof(edges[0]))] : rnd((unsigned)cap + 1);
    if (target > cap)
        cap = target;
    char *s = malloc(cap + 1);
    size_t len = 0;
    if (rnd(2)) { /* a leading '/' or zeros: edge-length paths and sizes that are valid */
        s[len++] = rnd(2) ? '/' : '0';
        while (len + 3 < target && rnd(64))
            s[len++] = '0';
    }
    while (len < target) {
        if (rnd(3)) {
            const char *p = pieces[rnd(sizeof(pieces) / sizeof(pieces[0]))];
            size_t n = strlen(p);
            if (len + n > target)
                break;
            memcpy(s + len, p, n);
            len += n;
        } else {
            s[len++] = (char)(1 + rnd(255));
        }
    }
    s[len] = '\0';
    return s;
}

static void check_terminated(void)
{
    EXPECT(strnlen(transit_opts.policy, sizeof(transit_opts.policy)) < sizeof(transit_opts.policy));
    EXPECT(strnlen(transit_opts.mem_limit, sizeof(transit_opts.mem_limit)) < sizeof(transit_opts.mem_limit));
    EXPECT(strnlen(transit_opts.report_dir, sizeof(transit_opts.report_dir)) < sizeof(transit_opts.report_dir));
}

int main(int argc, char **argv)
{
    unsigned long iterations = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    unsigned long accepted = 0, rejected = 0;
    char err[TRANSIT_ERR_MAX];

    fixed_cases();
    reset();
    for (unsigned long i = 0; i < iterations; i++) {
        char *value = random_value();
        int remote = (int)rnd(2);
        int repeat = rnd(50) == 0 ? 1000 : 1; /* the same option given many times */
        unsigned which = rnd(5);
        if (rnd(10) == 0)
            setenv(ALLOC_ENV, rnd(2) ? "(null)" : value, 1);
        for (int r = 0; r < repeat; r++) {
            int rc;
            switch (which) {
            case 0: rc = transit_opt_policy(0, rnd(20) ? value : NULL, remote); break;
            case 1: rc = transit_opt_mem_limit(0, value, remote); break;
            case 2: rc = transit_opt_report_dir(0, value, remote); break;
            case 3: {
                char *av[] = {value, "lib=/opt/transit/lib/libtransit.so", value};
                rc = transit_conf_parse(&transit_conf, 1 + (int)rnd(3), av, err, sizeof(err));
                if (rc < 0)
                    reset();
                break;
            }
            default: rc = transit_opts_check(&transit_opts, &transit_conf, err, sizeof(err)); break;
            }
            rc == 0 ? accepted++ : rejected++;
            check_terminated();
        }
        (void)transit_effective_policy(&transit_opts, &transit_conf);
        (void)transit_effective_report_dir(&transit_opts, &transit_conf);
        unsetenv(ALLOC_ENV);
        free(value);
    }
    printf("spank_fuzz: %lu iterations, %lu accepted, %lu rejected, %lu error lines, %d failures\n",
           iterations, accepted, rejected, errors_logged, failures);
    return failures ? 1 : 0;
}
