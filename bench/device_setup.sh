# Sourced at the start of every device command (the driver scripts source it themselves):
#   source bench/device_setup.sh            (or `... transit`: fails without a usable libtransit)
# Sets the environment the device requires, installs the carried wheels (.whl, see
# bench/wheels.txt) and builds libtransit in the tree with the device's cmake and CUDA headers,
# so that `python3 -m transit run ...` works from the repository root.

# NVLink multicast stays off on the device, always (a program that uses it can take the host's
# shared GPUs out of service): NCCL, PyTorch symmetric memory and NVSHMEM.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
# Where DeepSpeed's JIT-built ops go (the CPU Adam op is built on first use). Its build refuses an
# nvcc whose version differs from torch's CUDA; both are 13.0 on the device, and a minor mismatch
# (it knows compatible minors only up to CUDA 12) should not cost the DeepSpeed runs.
export TORCH_EXTENSIONS_DIR=/tmp/torch_extensions DS_SKIP_CUDA_CHECK=1

_setup_t0=$SECONDS
if compgen -G ".whl/*.whl" >/dev/null; then
    # Once per machine and set of wheels, under a lock: two drivers started side by side would
    # otherwise race pip on /tmp/site.
    mkdir -p /tmp/site
    _wheels_stamp=/tmp/site/.installed-$(stat -c '%n %s %Y' .whl/*.whl | md5sum | cut -c1-12)
    ( flock 9 || exit 1
      [ -e "$_wheels_stamp" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
          --upgrade --target /tmp/site .whl/*.whl && touch "$_wheels_stamp"; } ) 9>/tmp/site.lock || return 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# TRANSIT_BUILD_OK tells the drivers whether TRANSIT runs are possible; the comparison still
# measures the other systems without it.
TRANSIT_BUILD_OK=1
# TRANSIT_PREBUILT=1: an earlier driver in the same command built (or swapped in) transit/lib; keep it.
if [ "${TRANSIT_PREBUILT:-0}" = 1 ]; then
    python3 -m transit lib-path >/dev/null || TRANSIT_BUILD_OK=0
else
    { CUDA_HOME=/usr/local/cuda cmake -S . -B build/device -DCMAKE_BUILD_TYPE=Release \
        && cmake --build build/device -j "$(nproc)" && cmake --install build/device --prefix . \
        && python3 -m transit lib-path; } >/tmp/transit-build.log 2>&1 \
        || { echo "device_setup: libtransit build failed:"; tail -30 /tmp/transit-build.log
             # TRANSIT_CARRIED_LIB=1: the device command carried transit/lib (built on the development
             # machine from the same tree; it links no CUDA library) for a machine whose build fails.
             if [ "${TRANSIT_CARRIED_LIB:-0}" = 1 ] && python3 -m transit lib-path; then
                 echo "device_setup: using the carried transit/lib/libtransit.so"
             else
                 TRANSIT_BUILD_OK=0
             fi; }
fi
echo "device_setup: done in $((SECONDS - _setup_t0))s;" \
    "libtransit $([ $TRANSIT_BUILD_OK = 1 ] && echo ready || echo MISSING);" \
    "$(python3 -c 'import torch; print("torch", torch.__version__, "GPUs", torch.cuda.device_count())')"
# A driver whose every run is a TRANSIT run stops here without libtransit.
[ "${1:-}" != transit ] || [ "$TRANSIT_BUILD_OK" = 1 ]
