"""Reader for the ACME traces (InternLM/AcmeTrace ``trace_seren.csv`` and ``trace_kalos.csv``).

Columns (Seren): ``job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,
end_time,duration,queue,gpu_time``; Kalos adds ``mem_per_pod_GB,shared_mem_per_pod,fail_time,
stop_time``. Times are ISO strings with an offset (``+08:00`` Seren, ``+00:00`` Kalos);
``duration`` is ``end - start`` in seconds. The cluster is named after the file
(``trace_seren.csv``: ``seren``).
"""

from __future__ import annotations

from pathlib import Path

from transit.sim._csv import read_gpu_csv
from transit.sim.jobs import TraceLoad

REQUIRED_COLUMNS = ("job_id", "gpu_num", "state", "submit_time", "start_time", "end_time", "type")


def read(path: str) -> TraceLoad:
    return read_gpu_csv(path, "acme", REQUIRED_COLUMNS, Path(path).stem.removeprefix("trace_"))
