"""Reader for the Helios traces (S-Lab-System-Group/HeliosData ``<cluster>/cluster_log.csv``).

Columns: ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,
duration,queue``. Times are wall-clock strings without an offset (``2020-04-01 00:00:20``);
they are read as UTC, since only differences matter. Nodes have 8 GPUs. The cluster is named
after the file's folder (``Venus/cluster_log.csv``: ``Venus``), or the file when it has its own name.
"""

from __future__ import annotations

from pathlib import Path

from transit.sim._csv import read_gpu_csv
from transit.sim.jobs import TraceLoad

REQUIRED_COLUMNS = ("job_id", "vc", "gpu_num", "state", "submit_time", "start_time", "end_time")


def read(path: str) -> TraceLoad:
    file = Path(path).resolve()
    cluster = file.parent.name if file.stem == "cluster_log" else file.stem
    return read_gpu_csv(path, "helios", REQUIRED_COLUMNS, cluster)
