"""cffi binding to libtransit's public API (and the internal functions the tests exercise)."""

from __future__ import annotations

import functools
from pathlib import Path

from cffi import FFI

from transit.errors import UsageError

PACKAGE_DIR = Path(__file__).resolve().parent
LIB_PATH = PACKAGE_DIR / "lib" / "libtransit.so"
HOOK_DIR = PACKAGE_DIR / "pyhook"

_CDEF = """
const char *transit_version(void);
void transit_mark_iteration(void);
void transit_pyhook_mark_iteration(void);
void transit_pyhook_armed(void);
char *transit_stats_json(void);
void transit_free(void *p);

typedef struct transit_task_request {
    const char *policy; const char *mem_limit; const char *out_dir; const char *lib_path;
    const char *hook_dir; const char *ld_preload; const char *pythonpath;
} transit_task_request;
typedef struct transit_env_var { const char *name; char *value; } transit_env_var;
int transit_task_env(const transit_task_request *req, transit_env_var *vars, char *err, size_t errlen);
void transit_task_env_free(transit_env_var *vars, int n);

/* config.c: the rules for every TRANSIT_* value, shared with the Slurm plugin */
int transit_parse_size(const char *var, const char *text, uint64_t *out, char *err, size_t errlen);
int transit_check_value(const char *var, const char *shown, const char *text, char *err, size_t errlen);
int transit_check_dir(const char *shown, const char *path, bool parent_must_exist, char *err, size_t errlen);
int transit_env_check(char *const envp[], char *err, size_t errlen);
int transit_policy_count(void);
const char *transit_policy_name(int p);
void transit_show(const char *text, char *out, size_t outlen);

/* internal, for tests */
typedef struct transit_alloc { uint64_t key; uint64_t size; int device; int kind; } transit_alloc;
int transit_alloc_insert(const transit_alloc *a);
int transit_alloc_remove(uint64_t key, transit_alloc *out);
size_t transit_alloc_count(void);
void transit_alloc_reset(void);
transit_alloc *transit_alloc_snapshot(int kind, size_t *n);
typedef struct transit_range { uint64_t addr; uint64_t bytes; } transit_range;
size_t transit_alloc_clip(uint64_t addr, uint64_t bytes, transit_range *out, size_t cap);

/* transit replay (libtransit/src/model/replay.h) */
typedef struct transit_replay_input {
    uint32_t nphases; const uint64_t *touch_offsets; const transit_range *touch;
    const uint64_t *compute_ns; const uint32_t *first_launch; uint32_t launches;
    uint64_t nchunks; const uint64_t *chunk_addr; const uint32_t *chunk_reuse;
} transit_replay_input;
typedef struct transit_replay_params {
    int policy; uint64_t limit; uint32_t warmup; uint32_t iterations;
    double prefetch_htod_bps, dtoh_bps, fault_htod_bps, zero_copy_bps; int look_ahead;
} transit_replay_params;
typedef struct transit_replay_iteration {
    uint64_t htod_bytes, dtoh_bytes, faults, zero_copy_bytes, evicted_chunks, resident_peak_bytes;
    uint64_t fill_bytes, streamed_bytes; double compute_s, transfer_s, step_s;
} transit_replay_iteration;
int transit_replay_run(const transit_replay_input *in, const transit_replay_params *params,
                       transit_replay_iteration *out, char *err, size_t errlen);
/* hybrid's placement (libtransit/src/model/placement.h) */
int transit_hybrid_place(const uint32_t *reuse, size_t n, uint64_t capacity, uint8_t *resident);
uint64_t transit_hybrid_capacity(uint64_t limit);
/* the profile's kernel kinds (libtransit/src/profile/kernel_kind.h) */
bool transit_kernel_rereads(const char *name);
int transit_parse_policy(const char *var, const char *text, int *out, char *err, size_t errlen);
"""
TASK_ENV_MAX = 8

ffi = FFI()
ffi.cdef(_CDEF)


def lib_path() -> Path:
    """Absolute path of the built libtransit.so (for LD_PRELOAD)."""
    if not LIB_PATH.is_file():
        raise UsageError(
            f"libtransit is not built: {LIB_PATH} is missing; run `pip install .` "
            "or `cmake -S . -B build && cmake --build build && cmake --install build --prefix .`"
        )
    return LIB_PATH


@functools.cache
def lib():
    return ffi.dlopen(str(lib_path()))


def version() -> str:
    return ffi.string(lib().transit_version()).decode()


def stats() -> str:
    """This process's statistics document (JSON text)."""
    p = lib().transit_stats_json()
    try:
        return ffi.string(p).decode()
    finally:
        lib().transit_free(p)


def _c(text: str | None):
    return ffi.new("char[]", text.encode()) if text is not None else ffi.NULL


def task_env(
    policy: str | None,
    mem_limit: str | None,
    out_dir: str | None,
    ld_preload: str | None,
    pythonpath: str | None,
) -> dict[str, str]:
    """The environment a TRANSIT task gets: the one rule shared with the Slurm plugin."""
    keep = [_c(policy), _c(mem_limit), _c(out_dir), _c(str(lib_path())), _c(str(HOOK_DIR)),
            _c(ld_preload), _c(pythonpath)]
    req = ffi.new("transit_task_request *", keep)
    vars_ = ffi.new("transit_env_var[]", TASK_ENV_MAX)
    err = ffi.new("char[]", 512)
    n = lib().transit_task_env(req, vars_, err, 512)
    if n < 0:
        raise UsageError(ffi.string(err).decode())
    try:
        return {ffi.string(vars_[i].name).decode(): ffi.string(vars_[i].value).decode() for i in range(n)}
    finally:
        lib().transit_task_env_free(vars_, n)


ERR_MAX = 1024  # one message line from config.c


def _b(text: str) -> bytes:
    """Text as the C side gets it: the bytes it came from (os.environ and argv keep undecodable
    bytes as surrogates)."""
    return text.encode("utf-8", "surrogateescape")


def _checked(call, *args) -> None:
    """Calls a config.c check that takes (..., err, errlen); its message becomes a UsageError."""
    err = ffi.new("char[]", ERR_MAX)
    if call(*args, err, ERR_MAX):
        raise UsageError(ffi.string(err).decode())


def parse_size(text: str, var: str = "size") -> int:
    """Bytes of a size such as 40G, by TRANSIT's one size grammar; `var` (a TRANSIT_* size
    variable) picks its bounds and names it in the message, any other name gets 1 byte to 1024T."""
    out = ffi.new("uint64_t *")
    _checked(lib().transit_parse_size, _b(var), _b(text), out)
    return int(out[0])


def check_value(var: str, shown: str, text: str) -> None:
    """`text` by the rules of TRANSIT_* variable `var`, named `shown` (e.g. an option) in the message."""
    _checked(lib().transit_check_value, _b(var), _b(shown), _b(text))


def check_dir(shown: str, path: str, parent_must_exist: bool = False) -> None:
    """A directory for TRANSIT's output: absolute, no control characters, not under /proc, /sys, /dev."""
    _checked(lib().transit_check_dir, _b(shown), _b(path), parent_must_exist)


def env_check(env: dict[str, str]) -> None:
    """The environment a task gets, as libtransit will read it: every TRANSIT_* name known, every
    value (and their combination) accepted."""
    entries = [ffi.new("char[]", _b(f"{k}={v}")) for k, v in env.items()]
    envp = ffi.new("char *[]", [*entries, ffi.NULL])
    _checked(lib().transit_env_check, envp)


def show(text: str) -> str:
    """`text` as messages show a value: its first 80 characters, control and non-ASCII bytes escaped."""
    out = ffi.new("char[]", ERR_MAX)
    lib().transit_show(_b(text), out, ERR_MAX)
    return ffi.string(out).decode()


def policy_number(name: str, what: str = "policy") -> int:
    """The C enum value of a policy name (config.c holds the one list)."""
    out = ffi.new("int *")
    _checked(lib().transit_parse_policy, _b(what), _b(name), out)
    return int(out[0])


def policies() -> tuple[str, ...]:
    """libtransit's policies, in its order (config.c holds the one list)."""
    count = lib().transit_policy_count()
    return tuple(ffi.string(lib().transit_policy_name(i)).decode() for i in range(count))
