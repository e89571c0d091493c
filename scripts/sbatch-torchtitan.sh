#!/bin/bash
# TorchTitan with TRANSIT under Slurm.
#
#   sbatch --nodes=4 scripts/sbatch-torchtitan.sh --module llama3 --config llama3_8b [MORE TORCHTITAN ARGS]
#   (older TorchTitan: ... scripts/sbatch-torchtitan.sh --job.config_file llama3_8b.toml)
#
# `transit launch --framework torchtitan` runs `srun torchrun ... -m torchtitan.train ARGS` across
# the allocation with --training.global_batch_size and --training.local_batch_size (TorchTitan
# derives the gradient accumulation from them) and the TP/PP degrees; TorchTitan's FSDP degree
# (-1 by default) takes the remaining ranks. Node count, rendezvous endpoint (first node) and
# rendezvous id (job id) come from Slurm; nothing about the allocation is written here.
#
# Settings (environment, exported by sbatch):
#   GLOBAL_BATCH     sequences per optimizer step (default: $TRANSIT_GLOBAL_BATCH, set by
#                    `transit submit --to-min`)
#   LOCAL_BATCH      sequences per rank per micro-batch (default 1)
#   TP, PP           tensor and pipeline parallel degrees (default 1)
#   NPROC_PER_NODE   processes per node (default: the GPUs Slurm gave the node)
#   LAUNCH_ARGS      more `transit launch` options, e.g. "--dry-run --json"
#
#SBATCH --job-name=transit-torchtitan
#SBATCH --ntasks-per-node=1
#SBATCH --transit=advise
set -euo pipefail

launch=(transit launch --framework torchtitan --local-batch "${LOCAL_BATCH:-1}" --tp "${TP:-1}" --pp "${PP:-1}")
if [[ -n ${GLOBAL_BATCH:-} ]]; then launch+=(--global-batch "$GLOBAL_BATCH"); fi
if [[ -n ${NPROC_PER_NODE:-} ]]; then launch+=(--nproc-per-node "$NPROC_PER_NODE"); fi
# shellcheck disable=SC2206  # LAUNCH_ARGS is a list of options, split on purpose
launch+=(${LAUNCH_ARGS:-})

exec "${launch[@]}" -- "$@"
