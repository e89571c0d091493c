/*
 * fuzz_options.c - drives the plugin's option callbacks, plugstack.conf parsing, the ELF check of
 * lib= and the environment check directly, with fixed cases (so the harness fails when the rules
 * break) and then random, very long and repeated values and corrupted copies of a real
 * libtransit.so. Built with AddressSanitizer and UndefinedBehaviorSanitizer by
 * tests/unit/test_spank_fuzz.py; any overrun aborts the run.
 * Usage: spank_fuzz ITERATIONS SEED LIBTRANSIT_SO
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "spank_transit.h"

#define LONG_LEN 100000
#define ALLOC_ENV "SLURM_SPANK__SLURM_SPANK_OPTION_transit_transit"
#define SITE_LIB "lib=/opt/transit/lib/libtransit.so"

static unsigned long errors_logged;
static int failures;

/* Slurm's logger, which the callbacks call: formatted (to exercise the format) but not shown. */
void slurm_error(const char *fmt, ...)
{
    char line[TRANSIT_ERR_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (strncmp(line, "transit: ", 9) != 0 || strchr(line, '\n')) {
        fprintf(stderr, "FAIL: error line without 'transit: ' prefix or with a newline: %s\n", line);
        failures++;
    }
    errors_logged++;
}

/* Not srun: transit_refuse() returns instead of exiting. */
spank_context_t spank_context(void)
{
    return S_CTX_ERROR;
}

#define EXPECT(cond)                                                                 \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            failures++;                                                              \
        }                                                                            \
    } while (0)

static int parse(int ac, char **av)
{
    char err[TRANSIT_ERR_MAX];
    return transit_conf_parse(&transit_conf, ac, av, err, sizeof(err));
}

static void reset(void)
{
    char *av[] = {SITE_LIB, "report_dir=/shared/transit"};
    transit_opts_reset(&transit_opts);
    if (parse(2, av) < 0) {
        fprintf(stderr, "FAIL: valid plugstack arguments rejected\n");
        exit(1);
    }
}

static void option_cases(void)
{
    char *longval = malloc(LONG_LEN + 1);
    memset(longval, 'G', LONG_LEN);
    longval[LONG_LEN] = '\0';

    reset();
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
    /* slurmstepd records what srun forwarded; the task's checks refuse it */
    EXPECT(transit_opt_policy(0, "fast", 1) == 0 && !strcmp(transit_opts.policy, "fast"));
    EXPECT(transit_opt_policy(0, "base", 0) == 0);
    EXPECT(transit_opt_mem_limit(0, "40G", 0) == 0 && !strcmp(transit_opts.mem_limit, "40G"));
    static const char *const bad_sizes[] = {"12Q", "", "0x10G", "1e3G", "1K", "255M", "16.5T", "40 G", "1.G",
                                            "40GiBB", "-1G", "inf", "1.0000000001G"};
    for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++)
        EXPECT(transit_opt_mem_limit(0, bad_sizes[i], 0) < 0 && !strcmp(transit_opts.mem_limit, "40G"));
    EXPECT(transit_opt_mem_limit(0, "256M", 0) == 0 && transit_opt_mem_limit(0, "16T", 0) == 0);
    EXPECT(transit_opt_mem_limit(0, longval, 0) < 0);
    EXPECT(transit_opt_report_dir(0, "relative", 0) < 0);
    EXPECT(transit_opt_report_dir(0, "/tmp", 0) == 0 && !strcmp(transit_opts.report_dir, "/tmp"));
    EXPECT(transit_opt_report_dir(0, "/proc/transit", 0) < 0 && !strcmp(transit_opts.report_dir, "/tmp"));
    EXPECT(transit_opt_report_dir(0, "/tmp/a\nb", 0) < 0);
    EXPECT(transit_opt_report_dir(0, "/nonexistent-transit/a", 0) < 0);
    longval[0] = '/';
    EXPECT(transit_opt_report_dir(0, longval, 0) < 0 && !strcmp(transit_opts.report_dir, "/tmp"));

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

    transit_opts_reset(&transit_opts);
    char *site[] = {"lib=/x/lib/libtransit.so", "policy=prefetch", "hook_dir=/x/hook"};
    EXPECT(parse(3, site) == 0 && !strcmp(transit_conf.hook_dir, "/x/hook"));
    EXPECT(transit_opt_policy(0, NULL, 0) == 0);
    EXPECT(!strcmp(transit_effective_policy(&transit_opts, NULL, &transit_conf), "prefetch"));
    /* the environment over the site's default, the option over the environment */
    EXPECT(!strcmp(transit_effective_policy(&transit_opts, "advise", &transit_conf), "advise"));
    EXPECT(transit_opt_policy(0, "base", 0) == 0);
    EXPECT(!strcmp(transit_effective_policy(&transit_opts, "advise", &transit_conf), "base"));
    free(longval);
}

static void plugstack_cases(const char *lib)
{
    char err[TRANSIT_ERR_MAX], lib_arg[PATH_MAX + 8];
    snprintf(lib_arg, sizeof(lib_arg), "lib=%s", lib);

    char *relative[] = {"lib=relative.so"};
    EXPECT(parse(1, relative) < 0);
    char *unknown[] = {SITE_LIB, "colour=blue"};
    EXPECT(parse(2, unknown) < 0);
    char *twice[] = {SITE_LIB, "lib=/y/libtransit.so"};
    EXPECT(parse(2, twice) < 0);
    char *no_lib[] = {"policy=advise"};
    EXPECT(parse(1, no_lib) < 0);
    char *bad_policy[] = {SITE_LIB, "policy=fast"};
    EXPECT(parse(2, bad_policy) < 0);
    static char *const modes[] = {"report_dir_mode=0600", "report_dir_mode=01777", "report_dir_mode=8",
                                  "report_dir_mode=", "report_dir_mode=0o750", "report_dir_mode=-700",
                                  "report_dir_mode=0755", "report_dir_mode=0770", "report_dir_mode=0777",
                                  "report_dir_mode=0751", "report_dir_mode=0760"};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        char *av[] = {SITE_LIB, modes[i]};
        EXPECT(parse(2, av) < 0);
    }
    char *mode[] = {SITE_LIB, "report_dir_mode=0750"};
    EXPECT(parse(2, mode) == 0 && transit_conf.job_dir_mode == 0750);
    char *mode_rx[] = {SITE_LIB, "report_dir_mode=0710"};
    EXPECT(parse(2, mode_rx) == 0 && transit_conf.job_dir_mode == 0710);

    char *real[] = {lib_arg, "report_dir=/tmp"};
    EXPECT(parse(2, real) == 0 && transit_conf_check(&transit_conf, err, sizeof(err)) == 0);
    char *missing[] = {"lib=/nonexistent/libtransit.so"};
    EXPECT(parse(1, missing) == 0 && transit_conf_check(&transit_conf, err, sizeof(err)) < 0);
    char *not_elf[] = {"lib=/etc/passwd"};
    EXPECT(parse(1, not_elf) == 0 && transit_conf_check(&transit_conf, err, sizeof(err)) < 0);
    char *dir_lib[] = {"lib=/tmp"};
    EXPECT(parse(1, dir_lib) == 0 && transit_conf_check(&transit_conf, err, sizeof(err)) < 0);
    char *no_report_dir[] = {lib_arg, "report_dir=/nonexistent-transit"};
    EXPECT(parse(2, no_report_dir) == 0 && transit_conf_check(&transit_conf, err, sizeof(err)) < 0);
    reset();
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
                                         "T", "K", "iB", "B", "/", "..", "e308", "-", "=", " ", "%s", "%n",
                                         "0x1p9", "inf", "nan", ":", "/proc", "/tmp", "TRANSIT_", "POLICY",
                                         "\n", "'"};
    /* lengths at the edges of the plugin's buffers, where off-by-one errors live */
    static const size_t edges[] = {TRANSIT_WORD_MAX - 1, TRANSIT_WORD_MAX, TRANSIT_WORD_MAX + 1,
                                   PATH_MAX - 65, PATH_MAX - 64, PATH_MAX - 1, PATH_MAX, PATH_MAX + 1};
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
    EXPECT(strnlen(transit_opts.report_dir, sizeof(transit_opts.report_dir)) <
           sizeof(transit_opts.report_dir));
}

/* What messages show of a value: bounded, printable ASCII only. */
static void check_shown(const char *value)
{
    char shown[TRANSIT_SHOW_MAX];
    transit_show(value, shown, sizeof(shown));
    EXPECT(strlen(shown) < sizeof(shown));
    for (const char *p = shown; *p; p++)
        EXPECT(*p >= 0x20 && *p < 0x7f);
}

/* A random environment: TRANSIT_* names (known, misspelt, random) with random values. */
static void fuzz_env(const char *value)
{
    static const char *const names[] = {"TRANSIT_POLICY", "TRANSIT_MEM_LIMIT", "TRANSIT_OUT",
                                        "TRANSIT_TICK_LOG", "TRANSIT_STATS_INTERVAL", "TRANSIT_PROFILE",
                                        "TRANSIT_POLCY", "TRANSIT_", "PATH", "TRANSIT_GLOBAL_BATCH"};
    char err[TRANSIT_ERR_MAX];
    char *envp[4] = {NULL};
    for (int i = 0; i < 3; i++) {
        const char *name = rnd(4) ? names[rnd(sizeof(names) / sizeof(names[0]))] : value;
        size_t n = strlen(name) + strlen(value) + 2;
        envp[i] = malloc(n);
        snprintf(envp[i], n, "%s=%s", name, rnd(2) ? value : "1");
    }
    (void)transit_env_check(envp, err, sizeof(err));
    for (int i = 0; i < 3; i++)
        free(envp[i]);
}

/* A copy of the real library, maybe cut short, with a few bytes changed: mostly in its first
 * pages (ELF header, symbol and string tables) and its last (the section headers), where the
 * reader's offsets and sizes come from. Exactly `cut` bytes are allocated, so ASan sees any
 * read past the end. */
static void fuzz_elf(const unsigned char *lib, size_t len)
{
    enum { HEAD = 8192, TAIL = 4096 };
    size_t cut = rnd(8) == 0 ? 1 + rnd((unsigned)len) : len;
    unsigned char *copy = malloc(cut);
    memcpy(copy, lib, cut);
    for (unsigned i = 0, n = 1 + rnd(16); i < n; i++) {
        unsigned where = rnd(4);
        size_t at = where < 2 ? rnd(HEAD < cut ? HEAD : (unsigned)cut)
                    : where == 2 ? cut - 1 - rnd(TAIL < cut ? TAIL : (unsigned)cut)
                                 : rnd((unsigned)cut);
        copy[at] = rnd(2) ? (unsigned char)rnd(256) : 0xff;
    }
    (void)transit_elf_defines(copy, cut, "transit_mark_iteration");
    free(copy);
}

static unsigned char *read_lib(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) < 0) {
        fprintf(stderr, "FAIL: cannot read %s\n", path);
        exit(1);
    }
    *len = (size_t)ftell(f);
    rewind(f);
    unsigned char *buf = malloc(*len);
    if (fread(buf, 1, *len, f) != *len)
        exit(1);
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s ITERATIONS SEED LIBTRANSIT_SO\n", argv[0]);
        return 2;
    }
    unsigned long iterations = strtoul(argv[1], NULL, 10);
    rng_state = strtoull(argv[2], NULL, 10);
    unsigned long accepted = 0, rejected = 0;
    char err[TRANSIT_ERR_MAX];
    size_t lib_len;
    unsigned char *lib = read_lib(argv[3], &lib_len);

    EXPECT(transit_elf_defines(lib, lib_len, "transit_mark_iteration") == 1);
    EXPECT(transit_elf_defines(lib, lib_len, "transit_no_such_function") == 0);
    EXPECT(transit_elf_defines(lib, 63, "transit_mark_iteration") == -1);
    option_cases();
    plugstack_cases(argv[3]);
    for (unsigned long i = 0; i < iterations; i++) {
        char *value = random_value();
        int remote = (int)rnd(2);
        unsigned which = rnd(8);
        int repeat = which < 4 && rnd(50) == 0 ? 1000 : 1; /* the same option given many times */
        if (rnd(10) == 0)
            setenv(ALLOC_ENV, rnd(2) ? "(null)" : value, 1);
        for (int r = 0; r < repeat; r++) {
            int rc = 0;
            switch (which) {
            case 0: rc = transit_opt_policy(0, rnd(20) ? value : NULL, remote); break;
            case 1: rc = transit_opt_mem_limit(0, value, remote); break;
            case 2: rc = transit_opt_report_dir(0, value, remote); break;
            case 3: {
                char *av[] = {value, SITE_LIB, value};
                rc = transit_conf_parse(&transit_conf, 1 + (int)rnd(3), av, err, sizeof(err));
                if (rc < 0)
                    reset();
                break;
            }
            case 4: rc = transit_check_dir("--out", value, rnd(2), err, sizeof(err)); break;
            case 5: fuzz_env(value); break;
            case 6: check_shown(value); break;
            default: fuzz_elf(lib, lib_len); break;
            }
            rc == 0 ? accepted++ : rejected++;
            check_terminated();
        }
        (void)transit_effective_policy(&transit_opts, rnd(2) ? value : NULL, &transit_conf);
        (void)transit_effective_report_dir(&transit_opts, &transit_conf);
        unsetenv(ALLOC_ENV);
        free(value);
    }
    free(lib);
    printf("spank_fuzz: %lu iterations, %lu accepted, %lu rejected, %lu error lines, %d failures\n",
           iterations, accepted, rejected, errors_logged, failures);
    return failures ? 1 : 0;
}
