"""cffi binding of libtransit's pure-logic pieces (period, attrib, ranges, chunks, hist, host residency, the
profile's aggregation, hybrid's placement, stream plan and guard) for unit tests.

Binds the built libtransit.so when transit._native.lib_path() finds one that exports these
functions; otherwise compiles the sources into a scratch shared object (they call no CUDA).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import cffi

from transit import _native
from transit.errors import UsageError

SRC_DIR = Path(__file__).resolve().parents[2] / "libtransit" / "src"
SOURCES = ("model/period.c", "model/ranges.c", "model/attrib.c", "model/chunks.c", "base/hist.c",
           "base/host_residency.c", "profile/profile_build.c", "profile/profile_render.c", "profile/profile_summary.c",
           "profile/multi_tensor.c", "profile/kernel_kind.c", "model/placement.c", "model/stream.c",
           "model/guard.c", "base/json.c")

CDEF = """
uint64_t transit_period_hash_name(const char *name);
typedef struct transit_period transit_period;
transit_period *transit_period_create(uint32_t history_cap);
void transit_period_destroy(transit_period *p);
unsigned transit_period_feed(transit_period *p, uint64_t name_hash, uint32_t *ordinal);
uint32_t transit_period_length(const transit_period *p);
uint64_t transit_period_iterations(const transit_period *p);
uint64_t transit_period_changes(const transit_period *p);

typedef struct transit_range { uint64_t addr; uint64_t bytes; } transit_range;
typedef struct transit_ranges transit_ranges;
transit_ranges *transit_ranges_create(uint64_t gap, size_t raw_cap);
void transit_ranges_destroy(transit_ranges *r);
void transit_ranges_reset(transit_ranges *r);
int transit_ranges_add(transit_ranges *r, uint32_t ordinal, uint64_t addr, uint64_t bytes);
int transit_ranges_finalize(transit_ranges *r);
int transit_ranges_finalized(const transit_ranges *r);
const transit_range *transit_ranges_get(const transit_ranges *r, uint32_t ordinal, size_t *count);
size_t transit_ranges_total_count(const transit_ranges *r);
int transit_ranges_add_all(transit_ranges *dst, const transit_ranges *src);
uint64_t transit_ranges_total_bytes(const transit_ranges *r);
uint64_t transit_ranges_dropped(const transit_ranges *r);

typedef struct transit_attrib transit_attrib;
typedef struct transit_attrib_counts {
    uint64_t attributed, attributed_bytes;
    uint64_t unattributed, unattributed_bytes;
    uint64_t pending;
} transit_attrib_counts;
transit_attrib *transit_attrib_create(transit_ranges *out, size_t kernel_cap, size_t pending_cap);
void transit_attrib_destroy(transit_attrib *a);
void transit_attrib_kernel(transit_attrib *a, uint64_t start_ns, uint64_t end_ns, uint32_t ordinal);
void transit_attrib_migration(transit_attrib *a, uint64_t start_ns, uint64_t addr, uint64_t bytes);
void transit_attrib_flush(transit_attrib *a);
transit_attrib_counts transit_attrib_get_counts(const transit_attrib *a);

typedef struct transit_chunks transit_chunks;
transit_chunks *transit_chunks_create(size_t max_chunks);
void transit_chunks_destroy(transit_chunks *c);
uint64_t transit_chunks_migrated(transit_chunks *c, uint64_t addr, uint64_t bytes);
uint64_t transit_chunks_arrived_cold(transit_chunks *c, uint64_t addr, uint64_t bytes, uint64_t *untracked);
void transit_chunks_dropped(transit_chunks *c, uint64_t addr, uint64_t bytes);
size_t transit_chunks_make_room(transit_chunks *c, const transit_range *need, size_t n, uint64_t target, transit_range *out, size_t out_cap);
uint64_t transit_chunks_resident_bytes(const transit_chunks *c);
size_t transit_chunks_count(const transit_chunks *c);
size_t transit_chunks_pick_victims(transit_chunks *c, uint64_t target, transit_range *out, size_t out_cap);
int64_t transit_uvm_host_rss_parse(const char *smaps);
int64_t transit_statm_rss_parse(const char *statm, uint64_t page_bytes);
int64_t transit_host_bytes_in(int fd, uint64_t addr, uint64_t bytes);
size_t transit_chunks_spilled(const transit_chunks *c, uint64_t addr, uint64_t bytes, transit_range *out, size_t out_cap, uint64_t *resume);

typedef struct transit_hist { uint64_t count[5]; uint64_t bytes[5]; } transit_hist;
typedef enum { TRANSIT_HIST_COUNT = 0, TRANSIT_HIST_BYTES = 1 } transit_hist_field;
int transit_hist_bin(uint64_t bytes);
const char *transit_hist_label(int bin);
void transit_hist_add(transit_hist *h, uint64_t bytes);
int transit_hist_json(const transit_hist *h, transit_hist_field field, char *buf, size_t cap);

typedef struct profile_launch { uint64_t start_ns, end_ns; uint32_t iteration, ordinal, name; } profile_launch;
typedef struct profile_ref { uint64_t addr; uint32_t launch; } profile_ref;
typedef struct profile_event { uint64_t start_ns, addr, bytes; uint32_t kind, chunks; } profile_event;
typedef struct profile_alloc { uint64_t addr, bytes; } profile_alloc;
typedef struct profile_input {
    const profile_launch *launches; const profile_ref *refs; const profile_event *events;
    const profile_alloc *allocs; const char *const *names;
    uint64_t nlaunches, nrefs, nevents, nallocs, nnames;
    uint64_t first_iteration; uint32_t iterations;
    uint64_t dropped_launches, dropped_refs, dropped_events;
    uint64_t unread_launches;
} profile_input;
typedef struct profile_summary {
    uint64_t *chunks; uint32_t *reuse; size_t n;
    uint32_t nphases; uint32_t *phase_ordinal; uint64_t *phase_kernel_ns; uint64_t *touch_offsets;
    transit_range *touch;
} profile_summary;
char *transit_profile_build(const profile_input *in, profile_summary *summary);
void transit_profile_summary_free(profile_summary *summary);
bool transit_kernel_rereads(const char *name);
int transit_hybrid_place(const uint32_t *reuse, size_t n, uint64_t capacity, uint8_t *resident);
size_t transit_hybrid_demote(const uint32_t *reuse, size_t n, uint64_t excess, uint8_t *resident, size_t *out,
                             size_t out_cap);
typedef struct transit_stream_input {
    uint32_t nphases; const uint64_t *touch_offsets; const transit_range *touch; const uint64_t *compute_ns;
    uint64_t nchunks; const uint64_t *chunk_addr; const uint8_t *resident;
    uint64_t staging_bytes; double htod_bps, dtoh_bps; const uint32_t *first_ordinal;
} transit_stream_input;
int transit_stream_plan(const transit_stream_input *in, uint32_t *issue, uint32_t *back, uint64_t *peak_staged_bytes);
typedef struct transit_stream_schedule {
    uint32_t nphases; uint32_t *ordinal; uint64_t *in_offsets, *back_offsets; transit_range *in, *back; uint32_t *wait;
    uint64_t streamed_bytes;
} transit_stream_schedule;
int transit_stream_schedule_make(const transit_stream_input *in, const uint32_t *issue, const uint32_t *back,
                                 transit_stream_schedule *out);
void transit_stream_schedule_free(transit_stream_schedule *s);
typedef enum { TRANSIT_GUARD_UNDECIDED, TRANSIT_GUARD_HYBRID, TRANSIT_GUARD_ADVISE } transit_guard_kept;
typedef struct transit_guard_verdict {
    transit_guard_kept kept; double hybrid_step_s, advise_step_s; size_t hybrid_steps, advise_steps;
} transit_guard_verdict;
transit_guard_verdict transit_guard_decide(const double *hybrid_s, size_t nhybrid, const double *advise_s,
                                           size_t nadvise);
void free(void *p);
"""

# One function per source file: a library lacking any of them predates that file.
PROBES = ("transit_period_create", "transit_ranges_create", "transit_attrib_create",
          "transit_chunks_create", "transit_hist_json", "transit_profile_build", "transit_kernel_rereads", "transit_hybrid_place",
          "transit_hybrid_demote", "transit_stream_plan", "transit_stream_schedule_make", "transit_guard_decide")


def _built_library(ffi: cffi.FFI):
    try:
        path = _native.lib_path()
    except UsageError:  # not built
        return None
    lib = ffi.dlopen(str(path))
    try:
        for name in PROBES:
            getattr(lib, name)
    except AttributeError:
        return None
    return lib


def compile_sources(build_dir: Path) -> Path:
    """Builds the logic sources into build_dir/liblogic.so with the project's flags and definitions
    (libtransit/CMakeLists.txt)."""
    out = build_dir / "liblogic.so"
    includes = [f"-I{SRC_DIR / layer}" for layer in ("base", "model", "profile")]
    cmd = ["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", *includes, "-o",
           str(out)]
    subprocess.run(cmd + [str(SRC_DIR / s) for s in SOURCES], check=True, capture_output=True, text=True)
    return out


def load(build_dir: Path):
    """Returns (ffi, lib): the built libtransit.so if it has these functions, else a scratch build."""
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    lib = _built_library(ffi)
    if lib is None:
        lib = ffi.dlopen(str(compile_sources(build_dir)))
    return ffi, lib
