/* profile.h - the warm-up profile as data (TRANSIT_PROFILE=1).
 *
 * While the first profiling window is open (recorder.h), the profile collects, per launch of a
 * profiled iteration, the kernel's name, its GPU time, and the managed addresses its arguments
 * hold (the parameter buffer read word by word at launch: a pointer into a managed allocation is
 * a place the kernel reads or writes); and the unified memory records (HtoD, DtoH, GPU faults,
 * remote maps). At the window's end it aggregates them into phases and 2 MiB chunks
 * (profile_build.c), hands the summary to the policy that plans from it (the policy engine
 * passes that policy's window-end event) and writes rank<R>.<host>.<pid>.profile.json.gz beside
 * the stats file (schema transit.profile/1, docs/profile.md). `transit replay` runs the
 * policies' decisions on it, and the hybrid policy places data by it (collected for it whether
 * or not the file is written). Memory is bounded by the PROFILE_MAX_* caps; what does not fit is
 * counted as dropped. */
#ifndef TRANSIT_PROFILE_H
#define TRANSIT_PROFILE_H

#include "profile_data.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- the collector (profile.c) ---- */

/* The recorder opens its first full profiling window of `iterations` from `first`, or the steady
 * one (TRANSIT_PROFILE_STEADY), written as rank<R>.<host>.<pid>.steady.profile.json.gz.
 * `planned`: the active policy plans from the profile (it collects without TRANSIT_PROFILE,
 * and again at every new profiling window). */
void transit_profile_window_begin(uint64_t first, uint32_t iterations, bool steady, bool planned);
/* True while the window collects for the profile: kernel times are then needed. */
bool transit_profile_collecting(void);
/* A managed allocation (the scan's bounds). */
void transit_profile_allocated(uint64_t ptr, uint64_t bytes);
/* A launch in the window, at API entry on the launching thread: corr and runtime_corr are the
 * correlation ids its kernel record may carry; params/extra as cuLaunchKernel takes them. */
void transit_profile_launch(uint64_t iteration, uint32_t ordinal, uint32_t corr, uint32_t runtime_corr,
                            const char *symbol, void *function, void **params, void **extra);
/* Activity records, from CUPTI's buffer thread. */
void transit_profile_kernel(uint32_t corr, uint64_t start_ns, uint64_t end_ns);
void transit_profile_event(profile_event_kind kind, uint64_t start_ns, uint64_t addr, uint64_t bytes);
/* What the policy that plans from a profile is handed at its window's end (not the steady one's). */
typedef void (*transit_profile_planner)(const profile_summary *profile);
/* The window ended and its records were flushed (complete), or the process exits first: builds
 * the profile, hands its summary to `plan` (NULL: none plans from it) and writes the file, once. */
void transit_profile_window_end(bool complete, transit_profile_planner plan);
void transit_profile_after_fork(void);

#endif
