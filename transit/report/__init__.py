"""The report of what TRANSIT did in a job, from its per-rank stats files, the plugin's step files
and Slurm; one line per job for several jobs, an array, or a user's jobs over a time range.

Modules, one concern each (the command itself is cli.py):
  jobs.py        which jobs the command names (ids, arrays, directories, -u USER -S -E) and where
                 each one's stats directory is
  load.py        the data sources: StatsFiles (rank<R>.<host>.<pid>.json) and their tick logs,
                 StepFiles (step-<step>.json), SubmitLines and SlurmJobs (sacct, squeue), and the named
                 warnings about the inputs
  aggregate.py   one row per rank, totals per node and per job, the job's header (how TRANSIT ran) and,
                 without stats, the reason
  thresholds.py  every threshold the notes and colours judge by
  notes.py       advice and warnings for the user, driven by those thresholds
  render.py      the text report of one job: header, tables coloured by threshold, notes
  predict.py     what replay over a rank's profile predicts for its steady iteration, beside the measured
  summary.py     the one-line-per-job list
  as_json.py     --json (schema "transit.report/1"; every key is documented in docs/report.md)
  plots.py       --plot DIR: the PNGs

docs/report.md is the user's and admin's documentation: the report directory, exit codes, why the
policy is read from the stats, then the step files, then the submit line, and the JSON keys.
"""
