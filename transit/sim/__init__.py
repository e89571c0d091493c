"""The simulator: what scale-in with TRANSIT would do to a cluster's queues and rack traffic.

A discrete-event simulator of a multi-rack cluster (the paper's section 4.3). It replays a job
trace twice, as is and with TRANSIT's node-count reduction on multi-node jobs, over the same jobs,
and compares.
Where the trace records start times, the baseline's queues are first checked against them.
Input: the cluster's own Slurm history (``sacct -P`` or ``sacct --json``), the ACME or Helios
traces, the project's ``transit.trace/1`` JSON, or, with no ``--trace``, a synthetic Seren-like
(or Kalos-like) trace calibrated on the published ACME CDFs. The model, its parameters and the
JSON schema are in docs/simulator.md.

Modules (the command itself is cli.py):
  traces.py, sacct.py, sacct_json.py, acme.py, helios.py, project_json.py, _csv.py  trace readers
  synthetic.py   the calibrated synthetic trace
  jobs.py        the job record and the load summary
  scenario.py    a study's setup, its factors and the replay of both scenarios
  engine.py, placement.py, network.py  the event loop, node placement and rack traffic
  study.py, metrics.py, validation.py  one study's figures and the baseline's check against the trace
  sweep.py       many studies over a grid, in processes
  output.py      table, JSON and plot; audit.py  --jobs-out and --timeline-out CSVs
"""
