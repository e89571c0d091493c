/* period.c - iteration detection from the kernel-name sequence; see period.h. */
#include "period.h"

#include <stdlib.h>
#include <string.h>

#define SIG_BASE 0x100000001B3ull /* odd: the rolling signature is a polynomial mod 2^64 */
#define NO_GAP UINT32_MAX

typedef struct sig_entry {
    uint64_t sig; /* 0: empty slot */
    uint32_t last; /* position of the latest occurrence, relative to the epoch start */
    uint32_t count;
    uint32_t first_gap;        /* spacing of the first two occurrences */
    uint32_t min_gap, max_gap; /* over the spacings after the first */
} sig_entry;

struct transit_period {
    uint64_t launches;
    uint64_t names[TRANSIT_PERIOD_WINDOW]; /* mixed hashes of the last launches, ring */
    uint64_t sig;                          /* rolling signature of names[] */
    uint64_t base_pow_window;              /* SIG_BASE ^ TRANSIT_PERIOD_WINDOW */

    uint32_t history_cap;
    sig_entry *table;
    size_t mask;
    size_t entries;
    uint64_t epoch_start;

    /* A cycle begins at creation and again when a trusted lock is lost (the sequence changed). */
    uint64_t cycle_start; /* first launch of the cycle that has a signature */
    uint64_t part_span;   /* longest section of a held lock lost in this cycle */

    int locked;
    int held;   /* locked but not trusted: returns neither BEGIN nor LOCKED */
    int marked; /* this lock has returned BEGIN */
    uint64_t anchor;
    uint64_t period;
    uint64_t first_anchor;    /* the anchor's first occurrence, from its spacings */
    uint64_t held_iterations; /* iterations begun on time while held, the lock's own included */
    uint64_t start;           /* launch that began the current iteration (inferred after a miss) */
    uint64_t last_anchor;     /* launch of the latest anchor occurrence */
    uint64_t last_gap;        /* spacing of the two latest anchor occurrences */
    unsigned misses;

    uint64_t locks; /* taken, held or not */
    uint64_t iterations, changes;
};

uint64_t transit_period_hash_name(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *s = (const unsigned char *)name; *s; s++) {
        h ^= *s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* splitmix64's finalizer: spreads the caller's hash over all bits. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t tolerance(uint64_t gap)
{
    return TRANSIT_MAX((uint64_t)TRANSIT_PERIOD_TOL_MIN, gap / TRANSIT_PERIOD_TOL_DIV);
}

static uint64_t distance(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

transit_period *transit_period_create(uint32_t history_cap)
{
    transit_period *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->history_cap = history_cap ? history_cap : TRANSIT_PERIOD_HISTORY_DEFAULT;
    /* An epoch holds at most history_cap launches, and far fewer distinct signatures when the
     * sequence is periodic; half as many slots, reset at 3/4 full. */
    size_t slots = 1024;
    while (slots < p->history_cap / 2)
        slots <<= 1;
    p->table = calloc(slots, sizeof *p->table);
    if (!p->table) {
        free(p);
        return NULL;
    }
    p->mask = slots - 1;
    p->cycle_start = TRANSIT_PERIOD_WINDOW - 1;
    p->base_pow_window = 1;
    for (int i = 0; i < TRANSIT_PERIOD_WINDOW; i++)
        p->base_pow_window *= SIG_BASE;
    return p;
}

void transit_period_destroy(transit_period *p)
{
    if (!p)
        return;
    free(p->table);
    free(p);
}

static void new_epoch(transit_period *p, uint64_t t)
{
    memset(p->table, 0, (p->mask + 1) * sizeof *p->table);
    p->entries = 0;
    p->epoch_start = t;
}

static sig_entry *find_entry(transit_period *p, uint64_t sig)
{
    size_t s = (size_t)((sig * 0x9E3779B97F4A7C15ull) >> 32) & p->mask;
    while (p->table[s].sig != 0 && p->table[s].sig != sig)
        s = (s + 1) & p->mask;
    return &p->table[s];
}

/* The period spans every part lost in this cycle: the iteration that held them. */
static int encloses_parts(const transit_period *p)
{
    return p->part_span && p->period >= p->part_span;
}

/* Whether a held lock is trusted from this iteration on. Only an anchor seen on time releases
 * it, so its first BEGIN is one iteration's, not a catch-up of those held back. */
static int release(transit_period *p, int on_time)
{
    if (!on_time || (!encloses_parts(p) && ++p->held_iterations < TRANSIT_PERIOD_HOLD_ITERATIONS))
        return 0;
    p->held = 0;
    return 1;
}

static unsigned begin_iteration(transit_period *p, uint64_t start, uint64_t t, unsigned flags,
                                uint32_t *ordinal)
{
    p->start = start;
    if (p->held && !release(p, start == t))
        return 0;
    if (!p->marked) {
        p->marked = 1;
        if (p->locks > 1)
            flags |= TRANSIT_PERIOD_CHANGED;
    }
    p->iterations++;
    if (flags & TRANSIT_PERIOD_CHANGED)
        p->changes++;
    *ordinal = (uint32_t)(t - start);
    return TRANSIT_PERIOD_LOCKED | TRANSIT_PERIOD_BEGIN | flags;
}

/* A held lock lost was a part of a longer iteration, from its anchor's first occurrence to the end
 * of its last iteration; a trusted one lost means the sequence changed, and its parts with it. */
static void lose(transit_period *p, uint64_t t)
{
    p->locked = 0;
    if (p->held) {
        p->part_span = TRANSIT_MAX(p->part_span, p->last_anchor + p->period - p->first_anchor);
    } else {
        p->cycle_start = t;
        p->part_span = 0;
    }
}

static unsigned search(transit_period *p, uint64_t sig, uint64_t t, uint32_t *ordinal)
{
    if (t - p->epoch_start >= p->history_cap || p->entries >= (p->mask + 1) / 4 * 3)
        new_epoch(p, t);
    uint32_t pos = (uint32_t)(t - p->epoch_start);
    sig_entry *e = find_entry(p, sig);
    if (e->sig == 0) {
        *e = (sig_entry){.sig = sig, .last = pos, .count = 1, .min_gap = NO_GAP, .max_gap = 0};
        p->entries++;
        return 0;
    }
    uint32_t gap = pos - e->last;
    e->last = pos;
    if (++e->count == 2) { /* the first spacing may span a warm-up iteration: not judged */
        e->first_gap = gap;
    } else {
        e->min_gap = TRANSIT_MIN(e->min_gap, gap);
        e->max_gap = TRANSIT_MAX(e->max_gap, gap);
    }
    if (e->count < TRANSIT_PERIOD_LOCK_OCCURRENCES || e->min_gap < TRANSIT_PERIOD_MIN ||
        e->max_gap - e->min_gap > tolerance(e->max_gap))
        return 0;
    uint64_t run = e->first_gap + (uint64_t)(TRANSIT_PERIOD_LOCK_OCCURRENCES - 2) * gap;
    p->locked = 1;
    p->anchor = sig;
    p->period = gap;
    p->first_anchor = t > run ? t - run : 0;
    p->last_anchor = t;
    p->last_gap = gap;
    p->misses = 0;
    p->locks++;
    p->marked = 0;
    p->held_iterations = 0;
    /* Trusted at once when nothing says it could be a part of a longer iteration (period.h). */
    int explains_cycle = p->first_anchor < p->cycle_start + gap;
    int longer_first_iteration = e->first_gap > e->max_gap;
    p->held = !explains_cycle && !longer_first_iteration && !encloses_parts(p);
    return begin_iteration(p, t, t, 0, ordinal);
}

static unsigned follow(transit_period *p, uint64_t sig, uint64_t t, uint32_t *ordinal)
{
    uint64_t since = t - p->start;
    if (sig == p->anchor) {
        uint64_t gap = t - p->last_anchor;
        int respaced =
            distance(gap, p->last_gap) <= tolerance(gap) && distance(gap, p->period) > tolerance(p->period);
        p->last_anchor = t;
        p->last_gap = gap;
        if (respaced && gap >= TRANSIT_PERIOD_MIN) {
            p->period = gap;
            p->misses = 0;
            return begin_iteration(p, t, t, TRANSIT_PERIOD_CHANGED, ordinal);
        }
        if (since + tolerance(p->period) >= p->period) {
            p->misses = 0;
            return begin_iteration(p, t, t, 0, ordinal);
        }
        /* Too early: a spurious occurrence, an ordinary launch of this iteration. */
    } else if (since > p->period + tolerance(p->period)) {
        if (++p->misses > TRANSIT_PERIOD_MAX_MISSES) {
            lose(p, t);
            return 0;
        }
        return begin_iteration(p, p->start + p->period, t, 0, ordinal);
    }
    if (p->held)
        return 0;
    *ordinal = (uint32_t)since;
    return TRANSIT_PERIOD_LOCKED;
}

unsigned transit_period_feed(transit_period *p, uint64_t name_hash, uint32_t *ordinal)
{
    uint64_t t = p->launches++;
    uint64_t name = mix(name_hash);
    uint64_t *slot = &p->names[t % TRANSIT_PERIOD_WINDOW];
    p->sig = p->sig * SIG_BASE + name - *slot * p->base_pow_window;
    *slot = name;
    if (t + 1 < TRANSIT_PERIOD_WINDOW)
        return 0;
    uint64_t sig = p->sig ? p->sig : 1; /* 0 marks an empty table slot */
    return p->locked ? follow(p, sig, t, ordinal) : search(p, sig, t, ordinal);
}

uint32_t transit_period_length(const transit_period *p)
{
    return p->locked && !p->held ? (uint32_t)p->period : 0;
}

uint64_t transit_period_iterations(const transit_period *p)
{
    return p->iterations;
}

uint64_t transit_period_changes(const transit_period *p)
{
    return p->changes;
}
