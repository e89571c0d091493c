#!/bin/bash
# TorchTitan with TRANSIT under Slurm.
#
#   sbatch --nodes=4 scripts/sbatch-torchtitan.sh --module llama3 --config llama3_8b [MORE TORCHTITAN ARGS]
#   (older TorchTitan: ... scripts/sbatch-torchtitan.sh --job.config_file llama3_8b.toml)
#
# `transit launch --torchtitan` runs `srun torchrun ... -m torchtitan.train ARGS` across the
# allocation with the global and local batch (TorchTitan derives the gradient accumulation from
# them) and the TP/PP degrees, under the names the installed TorchTitan reads (its config classes
# say which); TorchTitan's FSDP degree (-1 by default) takes the remaining ranks. Node count, rendezvous endpoint (first node) and
# rendezvous id (job id) come from Slurm; nothing about the allocation is written here.
#
# Settings (environment, exported by sbatch):
#   GLOBAL_BATCH     sequences per optimizer step (default: $TRANSIT_GLOBAL_BATCH, which
#                    `transit submit` sets with the rest of its plan)
#   LOCAL_BATCH      sequences per rank per micro-batch (default: $TRANSIT_LOCAL_BATCH, else 1)
#   TP, PP           tensor and pipeline parallel degrees (default: $TRANSIT_TP/$TRANSIT_PP, else 1)
#   SEQ_LEN          tokens per sequence, passed to TorchTitan (needed where it counts tokens)
#   NPROC_PER_NODE   processes per node (default: the GPUs Slurm gave the node)
#   LAUNCH_ARGS      more `transit launch` options, e.g. "--dry-run --json"
#
#SBATCH --job-name=transit-torchtitan
#SBATCH --ntasks-per-node=1
#SBATCH --transit=advise
set -euo pipefail

launch=(transit launch --torchtitan)
if [[ -n ${GLOBAL_BATCH:-} ]]; then launch+=(--global-batch "$GLOBAL_BATCH"); fi
if [[ -n ${LOCAL_BATCH:-} ]]; then launch+=(--local-batch "$LOCAL_BATCH"); fi
if [[ -n ${TP:-} ]]; then launch+=(--tp "$TP"); fi
if [[ -n ${PP:-} ]]; then launch+=(--pp "$PP"); fi
if [[ -n ${SEQ_LEN:-} ]]; then launch+=(--seq-len "$SEQ_LEN"); fi
if [[ -n ${NPROC_PER_NODE:-} ]]; then launch+=(--nproc-per-node "$NPROC_PER_NODE"); fi
# shellcheck disable=SC2206  # LAUNCH_ARGS is a list of options, split on purpose
launch+=(${LAUNCH_ARGS:-})

exec "${launch[@]}" -- "$@"
