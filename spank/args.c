/*
 * args.c - plugstack.conf arguments, e.g.
 *   required spank_transit.so lib=/opt/transit/lib/libtransit.so report_dir=/shared/transit
 * Only the administrator writes these; no user input ever reaches struct transit_conf.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "spank_transit.h"

struct transit_conf transit_conf;

static const struct conf_key {
    const char *name;
    size_t offset; /* of the char array in struct transit_conf */
    size_t size;
    bool is_path;  /* must be absolute */
} conf_keys[] = {
    {"lib", offsetof(struct transit_conf, lib), sizeof(transit_conf.lib), true},
    {"hook_dir", offsetof(struct transit_conf, hook_dir), sizeof(transit_conf.hook_dir), true},
    {"report_dir", offsetof(struct transit_conf, report_dir), sizeof(transit_conf.report_dir), true},
    {"policy", offsetof(struct transit_conf, policy), sizeof(transit_conf.policy), false},
};

static const struct conf_key *find_key(const char *arg, size_t keylen)
{
    for (size_t i = 0; i < sizeof(conf_keys) / sizeof(conf_keys[0]); i++) {
        if (strlen(conf_keys[i].name) == keylen && !strncmp(arg, conf_keys[i].name, keylen))
            return &conf_keys[i];
    }
    return NULL;
}

static int parse_one(struct transit_conf *conf, const char *arg, char *err, size_t errlen)
{
    const char *eq = strchr(arg, '=');
    const struct conf_key *key = eq ? find_key(arg, (size_t)(eq - arg)) : NULL;
    if (!key) {
        snprintf(err, errlen, "plugstack.conf: unknown argument '%.200s' (allowed: lib=, hook_dir=, "
                              "report_dir=, policy=)", arg);
        return -1;
    }
    const char *value = eq + 1;
    size_t len = strlen(value);
    if (len == 0 || len >= key->size) {
        snprintf(err, errlen, "plugstack.conf: %s= needs a value of 1 to %zu characters", key->name,
                 key->size - 1);
        return -1;
    }
    if (key->is_path && value[0] != '/') {
        snprintf(err, errlen, "plugstack.conf: %s=%s must be an absolute path", key->name, value);
        return -1;
    }
    memcpy((char *)conf + key->offset, value, len + 1);
    return 0;
}

int transit_conf_parse(struct transit_conf *conf, int ac, char **av, char *err, size_t errlen)
{
    memset(conf, 0, sizeof(*conf));
    for (int i = 0; i < ac; i++) {
        if (parse_one(conf, av[i], err, errlen) < 0)
            return -1;
    }
    if (!conf->hook_dir[0] && conf->lib[0]) {
        /* the installed layout: transit/lib/libtransit.so beside transit/pyhook/ */
        const char *slash = strrchr(conf->lib, '/');
        int n = snprintf(conf->hook_dir, sizeof(conf->hook_dir), "%.*s/../pyhook",
                         (int)(slash - conf->lib), conf->lib);
        if (n < 0 || (size_t)n >= sizeof(conf->hook_dir)) {
            snprintf(err, errlen, "plugstack.conf: lib= is too long to derive hook_dir= from");
            return -1;
        }
    }
    return 0;
}
