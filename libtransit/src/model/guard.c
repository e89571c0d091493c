/* guard.c - see guard.h. */
#include "guard.h"

#include <math.h>

/* The median of the usable samples among the first TRANSIT_GUARD_MAX_STEPS of s[0..n); 0 when
 * none. Insertion sort on the stack: at most 16 samples. */
static double median_of(const double *s, size_t n, size_t *usable)
{
    double v[TRANSIT_GUARD_MAX_STEPS];
    size_t m = 0;
    for (size_t i = 0; i < n && i < TRANSIT_GUARD_MAX_STEPS; i++) {
        if (!isfinite(s[i]) || s[i] <= 0)
            continue;
        size_t j = m++;
        for (; j > 0 && v[j - 1] > s[i]; j--)
            v[j] = v[j - 1];
        v[j] = s[i];
    }
    *usable = m;
    if (!m)
        return 0;
    return m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
}

TRANSIT_INTERNAL transit_guard_verdict transit_guard_decide(const double *hybrid_s, size_t nhybrid,
                                                            const double *advise_s, size_t nadvise)
{
    transit_guard_verdict v = {.kept = TRANSIT_GUARD_UNDECIDED};
    v.hybrid_step_s = median_of(hybrid_s, nhybrid, &v.hybrid_steps);
    v.advise_step_s = median_of(advise_s, nadvise, &v.advise_steps);
    if (v.hybrid_steps < TRANSIT_GUARD_STEPS || v.advise_steps < TRANSIT_GUARD_STEPS)
        return v;
    v.kept = v.advise_step_s < v.hybrid_step_s * (1 - TRANSIT_GUARD_TIE) ? TRANSIT_GUARD_ADVISE : TRANSIT_GUARD_HYBRID;
    return v;
}
