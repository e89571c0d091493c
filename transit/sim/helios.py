"""Reader for the Helios traces (S-Lab-System-Group/HeliosData ``<cluster>/cluster_log.csv``).

Columns: ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,
duration,queue``. Times are wall-clock strings without an offset (``2020-04-01 00:00:20``);
they are read as UTC, since only differences matter. Nodes have 8 GPUs.
"""

from __future__ import annotations

from transit.sim._csv import read_gpu_csv
from transit.sim.jobs import TraceLoad

REQUIRED_COLUMNS = ("job_id", "vc", "gpu_num", "state", "submit_time", "start_time", "end_time")


def read(path: str) -> TraceLoad:
    return read_gpu_csv(path, "helios", REQUIRED_COLUMNS)
