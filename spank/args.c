/*
 * args.c - plugstack.conf arguments, e.g.
 *   required spank_transit.so lib=/opt/transit/lib/libtransit.so report_dir=/shared/transit
 * Only the administrator writes these; no user input ever reaches struct transit_conf. Every
 * message names plugstack.conf and says that an administrator must act, so a user who meets one
 * in srun knows it is not their mistake.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "spank_transit.h"

#define ADMIN "; an administrator must fix the spank_transit.so line in plugstack.conf"
#define LIB_SYMBOL "transit_mark_iteration" /* what tells libtransit.so from any other library */
#define LIB_MAX_BYTES (256u << 20)          /* libtransit.so is about 1 MiB; read whole */

struct transit_conf transit_conf;

enum conf_kind { CONF_FILE, CONF_DIR, CONF_POLICY, CONF_MODE };

static const struct conf_key {
    const char *name;
    enum conf_kind kind;
    size_t offset; /* of the char array in struct transit_conf (not for CONF_MODE) */
    size_t size;
} conf_keys[] = {
    {"lib", CONF_FILE, offsetof(struct transit_conf, lib), sizeof(transit_conf.lib)},
    {"hook_dir", CONF_DIR, offsetof(struct transit_conf, hook_dir), sizeof(transit_conf.hook_dir)},
    {"report_dir", CONF_DIR, offsetof(struct transit_conf, report_dir), sizeof(transit_conf.report_dir)},
    {"report_dir_mode", CONF_MODE, 0, 0},
    {"policy", CONF_POLICY, offsetof(struct transit_conf, policy), sizeof(transit_conf.policy)},
};
#define NKEYS (sizeof(conf_keys) / sizeof(conf_keys[0]))

static const struct conf_key *find_key(const char *arg, size_t keylen)
{
    for (size_t i = 0; i < NKEYS; i++) {
        if (strlen(conf_keys[i].name) == keylen && !strncmp(arg, conf_keys[i].name, keylen))
            return &conf_keys[i];
    }
    return NULL;
}

/* report_dir_mode=0750: octal permission bits that give the job's user full access and nobody
 * else write access (the group may read: a job's stats can be written by its user alone, so
 * `transit report` can trust what it finds there). */
#define JOB_DIR_MODE_MAX 0750

static int parse_mode(const char *value, mode_t *out, char *err, size_t errlen)
{
    char shown[TRANSIT_SHOW_MAX];
    char *end = NULL;
    unsigned long mode = strtoul(value, &end, 8);
    if (value[0] < '0' || value[0] > '7' || *end || (mode & ~(unsigned long)JOB_DIR_MODE_MAX) ||
        (mode & 0700) != 0700) {
        transit_show(value, shown, sizeof shown);
        snprintf(err, errlen, "plugstack.conf: report_dir_mode='%s' is not allowed; use 0700 to 0750 "
                 "(the user's rwx, at most r-x for the group, nothing for others), e.g. 0750" ADMIN, shown);
        return -1;
    }
    *out = (mode_t)mode;
    return 0;
}

static int parse_one(struct transit_conf *conf, const char *arg, unsigned *seen, char *err, size_t errlen)
{
    char shown[TRANSIT_SHOW_MAX], why[TRANSIT_ERR_MAX];
    const char *eq = strchr(arg, '=');
    const struct conf_key *key = eq ? find_key(arg, (size_t)(eq - arg)) : NULL;
    transit_show(arg, shown, sizeof shown);
    if (!key) {
        snprintf(err, errlen, "plugstack.conf: unknown argument '%s' (allowed: lib=, hook_dir=, report_dir=, "
                 "report_dir_mode=, policy=)" ADMIN, shown);
        return -1;
    }
    unsigned bit = 1u << (key - conf_keys);
    if (*seen & bit) {
        snprintf(err, errlen, "plugstack.conf: %s= is given twice ('%s' is the second)" ADMIN, key->name,
                 shown);
        return -1;
    }
    *seen |= bit;
    const char *value = eq + 1;
    if (key->kind == CONF_MODE)
        return parse_mode(value, &conf->job_dir_mode, err, errlen);
    size_t len = strlen(value);
    if (len == 0 || len >= key->size) {
        snprintf(err, errlen, "plugstack.conf: %s= needs a value of 1 to %zu characters" ADMIN, key->name,
                 key->size - 1);
        return -1;
    }
    if (key->kind == CONF_POLICY && transit_parse_policy("policy", value, &(transit_policy){0}, why,
                                                         sizeof why) < 0) {
        snprintf(err, errlen, "plugstack.conf: %s" ADMIN, why);
        return -1;
    }
    if (key->kind != CONF_POLICY && value[0] != '/') {
        transit_show(value, shown, sizeof shown);
        snprintf(err, errlen, "plugstack.conf: %s='%s' must be an absolute path" ADMIN, key->name, shown);
        return -1;
    }
    memcpy((char *)conf + key->offset, value, len + 1);
    return 0;
}

int transit_conf_parse(struct transit_conf *conf, int ac, char **av, char *err, size_t errlen)
{
    unsigned seen = 0;
    memset(conf, 0, sizeof(*conf));
    conf->job_dir_mode = TRANSIT_JOB_DIR_MODE;
    for (int i = 0; i < ac; i++) {
        if (parse_one(conf, av[i], &seen, err, errlen) < 0)
            return -1;
    }
    if (!conf->lib[0]) {
        snprintf(err, errlen, "plugstack.conf: the spank_transit.so line has no lib=/path/to/libtransit.so"
                 ADMIN);
        return -1;
    }
    return 0;
}

/* Reads the whole of a regular file of at most LIB_MAX_BYTES; NULL with errno set otherwise. */
static unsigned char *read_file(const char *path, size_t *len)
{
    struct stat st;
    unsigned char *buf = NULL;
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) < 0)
        goto fail;
    if (!S_ISREG(st.st_mode) || st.st_size > (off_t)LIB_MAX_BYTES) {
        errno = S_ISREG(st.st_mode) ? EFBIG : EINVAL;
        goto fail;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        goto fail;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n <= 0) {
            errno = n < 0 ? errno : EIO;
            goto fail;
        }
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    return buf;
fail:
    free(buf);
    close(fd);
    return NULL;
}

static int check_lib(const char *path, char *err, size_t errlen)
{
    size_t len = 0;
    unsigned char *buf = read_file(path, &len);
    if (!buf) {
        snprintf(err, errlen, "plugstack.conf: lib=%.300s: %s" ADMIN, path,
                 errno == EINVAL ? "not a regular file" : strerror(errno));
        return -1;
    }
    int found = transit_elf_defines(buf, len, LIB_SYMBOL);
    free(buf);
    if (found != 1) {
        snprintf(err, errlen, "plugstack.conf: lib=%.300s is %s" ADMIN, path,
                 found < 0 ? "not a 64-bit ELF shared object for this machine"
                           : "not libtransit.so (it does not define " LIB_SYMBOL ")");
        return -1;
    }
    return 0;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int check_dir(const char *key, const char *path, char *err, size_t errlen)
{
    errno = 0;
    if (!is_dir(path)) {
        snprintf(err, errlen, "plugstack.conf: %s=%.300s: %s" ADMIN, key, path,
                 errno ? strerror(errno) : "not a directory");
        return -1;
    }
    return 0;
}

int transit_conf_check(struct transit_conf *conf, char *err, size_t errlen)
{
    if (check_lib(conf->lib, err, errlen) < 0)
        return -1;
    if (conf->hook_dir[0] && check_dir("hook_dir", conf->hook_dir, err, errlen) < 0)
        return -1;
    if (conf->report_dir[0] && check_dir("report_dir", conf->report_dir, err, errlen) < 0)
        return -1;
    if (!conf->hook_dir[0]) {
        /* the installed layout: transit/lib/libtransit.so beside transit/pyhook/, when it is there */
        const char *slash = strrchr(conf->lib, '/');
        char derived[sizeof(conf->hook_dir)];
        int n = snprintf(derived, sizeof(derived), "%.*s/../pyhook", (int)(slash - conf->lib), conf->lib);
        if (n > 0 && (size_t)n < sizeof(derived) && is_dir(derived))
            memcpy(conf->hook_dir, derived, (size_t)n + 1);
    }
    return 0;
}
