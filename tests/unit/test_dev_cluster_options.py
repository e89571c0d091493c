"""scripts/dev-cluster's own options, checked before it starts or writes anything (the cluster
itself is the slurm tier's subject)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

DEV_CLUSTER = Path(__file__).resolve().parents[2] / "scripts" / "dev-cluster"


def test_a_gpu_count_that_is_not_a_number_is_refused_before_anything_starts(tmp_path: Path) -> None:
    out = subprocess.run([str(DEV_CLUSTER), "up"], capture_output=True, text=True, check=False,
                         env={**os.environ, "TRANSIT_DEV_CLUSTER_DIR": str(tmp_path / "dc"),
                              "TRANSIT_DEV_CLUSTER_GPUS": "four"})
    assert (out.returncode, out.stderr) == (
        2, "dev-cluster: TRANSIT_DEV_CLUSTER_GPUS=four: expected a number of GPUs per node\n")
    assert not (tmp_path / "dc").exists()
