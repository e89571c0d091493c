"""scripts/dev-cluster's own options, checked before it starts or writes anything (the cluster
itself is the slurm tier's subject)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

DEV_CLUSTER = Path(__file__).resolve().parents[2] / "scripts" / "dev-cluster"


@pytest.mark.parametrize(("variable", "value", "allowed"), [
    ("TRANSIT_DEV_CLUSTER_GPUS", "four", "expected a number of GPUs per node"),
    ("TRANSIT_DEV_CLUSTER_ACCOUNTING", "yes", "expected 1 (slurmdbd) or 0 (none)"),
    ("TRANSIT_DEV_CLUSTER_PREFIX", "/nonexistent", ("expected the absolute path of a directory holding Slurm and "
     "munge unpacked with dpkg-deb -x (usr/sbin/slurmctld-wlm, usr/sbin/munged; scripts/fetch-slurm-debs)")),
])
def test_a_bad_value_is_refused_before_anything_starts(tmp_path: Path, variable: str, value: str,
                                                       allowed: str) -> None:
    out = subprocess.run([str(DEV_CLUSTER), "up"], capture_output=True, text=True, check=False,
                         env={**os.environ, "TRANSIT_DEV_CLUSTER_DIR": str(tmp_path / "dc"), variable: value})
    assert (out.returncode, out.stderr) == (2, f"dev-cluster: {variable}={value}: {allowed}\n")
    assert not (tmp_path / "dc").exists()
