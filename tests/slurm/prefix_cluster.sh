#!/usr/bin/env bash
# A dev cluster from Slurm and munge unpacked under PREFIX, with this host's installed ones hidden:
# run by tests/slurm/test_dev_cluster_prefix.py in a mount namespace of its own, where every file
# the installed packages put under /usr (and /lib) is covered by an empty one and their plugin
# directory by an empty directory, so that only PREFIX's can run. It starts the cluster in DC on
# ports PORT.. with one GPU per node, writes what the test checks into OUT/, and stops the cluster.
#   unshare --mount tests/slurm/prefix_cluster.sh PREFIX DC PORT OUT
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PREFIX=$1 DC=$2 PORT=$3 OUT=$4
# The installed counterparts of scripts/fetch-slurm-debs's packages, and the rest of Debian's Slurm.
INSTALLED=(slurmctld slurmd slurm-client slurm-wlm-basic-plugins slurmdbd slurm-wlm-mysql-plugin munge
    libmunge2 libslurm38 libhwloc15 libnuma1 libreadline8 libjson-c5 libyaml-0-2)
USER=transit-test

mount --make-rprivate /
empty=$(mktemp -d)
mount --bind "$empty" "/usr/lib/$(uname -m)-linux-gnu/slurm-wlm"
while read -r f; do
    [[ $f == /usr/* || $f == /lib/* ]] && [[ -f $f && ! -L $f ]] && mount --bind /dev/null "$f"
done < <(dpkg -L "${INSTALLED[@]}" 2>/dev/null | grep -v '^/usr/share/')

export TRANSIT_DEV_CLUSTER_PREFIX=$PREFIX TRANSIT_DEV_CLUSTER_DIR=$DC TRANSIT_DEV_CLUSTER_PORT=$PORT
# One GPU per node, as GRES: a stand-in device (dev-cluster's counted GPUs), as a GPU host declares its own.
export TRANSIT_DEV_CLUSTER_ACCOUNTING=0 TRANSIT_DEV_CLUSTER_GPUS=1
trap '"$REPO/scripts/dev-cluster" down' EXIT
"$REPO/scripts/dev-cluster" up
eval "$("$REPO/scripts/dev-cluster" env)"
mkdir -p "$OUT"

command -v munged srun sbatch squeue scontrol sinfo >"$OUT/commands"
for d in munged slurmctld slurmd-node1 slurmd-node4; do
    pid=$(cat "$DC/run/$d.pid")
    echo "$d $(readlink "/proc/$pid/exe")" >>"$OUT/daemons"
    awk '$6 ~ /\.so/ {print $6}' "/proc/$pid/maps" >>"$OUT/daemon-libraries"
done
# Each task's node and NCCL settings; the slurmstepd that started it (root's to read).
runuser -u "$USER" -- srun -N2 --transit=off sh -c \
    'echo "$SLURMD_NODENAME $NCCL_HOSTID $NCCL_SOCKET_IFNAME $NCCL_NET"' | sort >"$OUT/tasks"
srun -N2 --transit=off sh -c 'readlink /proc/$PPID/exe' >"$OUT/stepds"
runuser -u "$USER" -- srun -N2 --gpus-per-node=1 --transit=off sh -c \
    'echo "$SLURMD_NODENAME $SLURM_GPUS_ON_NODE $CUDA_VISIBLE_DEVICES"' | sort >"$OUT/gpu-tasks"
runuser -u "$USER" -- srun -N2 --transit=advise --transit-mem-limit=1G \
    sh -c 'echo "$TRANSIT_POLICY $TRANSIT_MEM_LIMIT"' >"$OUT/transit-tasks"
runuser -u "$USER" -- squeue --json --states=all >"$OUT/squeue.json"
# The quickstart's job, as on a host with no package registry (everything is built already).
PATH=$REPO/tests/fixtures/plan/bin:$PATH PYTHON=$(command -v python3) "$REPO/scripts/quickstart" --no-setup \
    >"$OUT/quickstart" 2>&1 || echo "exit $?" >>"$OUT/quickstart"
