#!/bin/bash
# Multi-node torchrun with TRANSIT under Slurm.
#
#   sbatch --nodes=4 scripts/sbatch-torchrun.sh train.py [ARGS...]
#   transit submit --nodes 4 --scale-in 0.5 scripts/sbatch-torchrun.sh train.py [ARGS...]
#
# Nothing about the allocation is written here: the node count, the hosts, the rendezvous
# endpoint (the first node) and the rendezvous id (the job id) all come from Slurm through
# `transit launch`, which also recomputes the data-parallel degree and gradient accumulation so
# the global batch stays the same on any node count. The training script reads them from
# TRANSIT_GLOBAL_BATCH, TRANSIT_LOCAL_BATCH and TRANSIT_GRAD_ACCUM.
#
# Settings (environment, exported by sbatch):
#   GLOBAL_BATCH     sequences per optimizer step (default: $TRANSIT_GLOBAL_BATCH, which
#                    `transit submit` sets with the rest of its plan)
#   LOCAL_BATCH      sequences per rank per micro-batch (default: $TRANSIT_LOCAL_BATCH, else 1)
#   NPROC_PER_NODE   processes per node (default: the GPUs Slurm gave the node; set it for CPU runs)
#   LAUNCH_ARGS      more `transit launch` options, e.g. "--dry-run --json" or "--tp 8"
#
#SBATCH --job-name=transit-torchrun
#SBATCH --ntasks-per-node=1
#SBATCH --transit=advise
set -euo pipefail

launch=(transit launch)
if [[ -n ${GLOBAL_BATCH:-} ]]; then launch+=(--global-batch "$GLOBAL_BATCH"); fi
if [[ -n ${LOCAL_BATCH:-} ]]; then launch+=(--local-batch "$LOCAL_BATCH"); fi
if [[ -n ${NPROC_PER_NODE:-} ]]; then launch+=(--nproc-per-node "$NPROC_PER_NODE"); fi
# shellcheck disable=SC2206  # LAUNCH_ARGS is a list of options, split on purpose
launch+=(${LAUNCH_ARGS:-})

exec "${launch[@]}" -- "$@"
