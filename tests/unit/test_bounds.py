"""Every numeric input of plan, submit and launch: a bad one ends in one line naming it, exit code 2.

Each case runs the real command line in this process (`transit.cli.main`) and checks the one
message, that it is alone on one line of at most 80 characters after the command's prefix, and that
nothing was printed on stdout (nothing planned, submitted or launched).
"""

from __future__ import annotations

import pytest

from transit import _native, cli
from transit.plan import launch

MODEL = ["--model", "llama3-8b"]
PLAN = ["plan", *MODEL, "--nodes", "16"]
SUBMIT = ["submit", "--nodes", "16", "--scale-in", "0.5", "--dry-run"]
LAUNCH = ["launch", "--dry-run", "--nodes", "2", "--nproc-per-node", "8", "--global-batch", "64"]

BAD_INPUTS = [
    # plan: node counts and candidates
    (["plan", *MODEL, "--nodes", "0"], "--nodes must be at least 1, got 0"),
    (["plan", *MODEL, "--nodes", "100001"], "--nodes must be at most 100000, got 100001"),
    (["plan", *MODEL, "--nodes", "-3"], "--nodes must be at least 1, got -3"),
    (["plan", *MODEL, "--nodes", "nan"], "--nodes must be an integer in [1, 100000], got 'nan'"),
    (["plan", *MODEL, "--nodes", "2.5"], "--nodes must be an integer in [1, 100000], got '2.5'"),
    (["plan", *MODEL, "--nodes", "1e3"], "--nodes must be an integer in [1, 100000], got '1e3'"),
    (["plan", *MODEL, "--nodes", "x" * 500], "--nodes must be an integer in [1, 100000], got 'xxxxxxxxxxxx"),
    ([*PLAN, "--candidates", "12,0"], "--candidates must be at least 1, got 0"),
    ([*PLAN, "--candidates", "12,x"], "--candidates must be an integer in [1, 100000], got 'x'"),
    ([*PLAN, "--candidates", ","], "--candidates needs at least one value, got ','"),
    ([*PLAN, "--candidates", ",".join(["8"] * 17)], "--candidates takes at most 16 values, got 17"),
    ([*PLAN, "--candidates", "20"], "--candidates 20 is more than --nodes 16"),
    ([*PLAN, "--scale-in", "1"], "--scale-in must be less than 1, got 1"),
    ([*PLAN, "--scale-in", "0"], "--scale-in must be more than 0, got 0"),
    ([*PLAN, "--scale-in", "0.5,inf"], "--scale-in must be a finite number, got inf"),
    ([*PLAN, "--scale-in", "-0.5"], "--scale-in must be more than 0, got -0.5"),
    ([*PLAN, "--scale-in", "0.5,,0.25"], "--scale-in has an empty value in '0.5,,0.25'; give numbers separated by"),
    ([*PLAN, "--candidates", "12,"], "--candidates has an empty value in '12,'; give numbers separated by commas"),
    # plan: batch
    ([*PLAN, "--global-batch", "0"], "--global-batch must be at least 1, got 0"),
    ([*PLAN, "--global-batch", "1e23"], "--global-batch must be an integer in [1, 1000000000], got '1e23'"),
    ([*PLAN, "--global-batch", "1000000001"], "--global-batch must be at most 1000000000, got 1000000001"),
    ([*PLAN, "--global-tokens", "-1"], "--global-tokens must be at least 1, got -1"),
    ([*PLAN, "--local-batch", "0"], "--local-batch must be at least 1, got 0"),
    ([*PLAN, "--seq-len", "0"], "--seq-len must be at least 1, got 0"),
    ([*PLAN, "--seq-len", "99999999999"], "--seq-len must be at most 16777216, got 99999999999"),
    # plan: parallelism
    ([*PLAN, "--tp", "0"], "--tp must be at least 1, got 0"),
    ([*PLAN, "--tp", "3"], "--tp 3 does not divide the 8 GPUs per node"),
    ([*PLAN, "--pp", "5"], "--pp 5 does not divide the model's 32 layers"),
    ([*PLAN, "--pp", "2000"], "--pp must be at most 1024, got 2000"),
    ([*PLAN, "--gpus-per-node", "0"], "--gpus-per-node must be at least 1, got 0"),
    ([*PLAN, "--tp", "16"], "--tp 16 does not divide the 8 GPUs per node"),
    # plan: the cluster
    ([*PLAN, "--hbm-gib", "nan"], "--hbm-gib must be a finite number, got nan"),
    ([*PLAN, "--hbm-gib", "inf"], "--hbm-gib must be a finite number, got inf"),
    ([*PLAN, "--hbm-gib", "0"], "--hbm-gib must be more than 0, got 0"),
    ([*PLAN, "--hbm-gib", "1"], "HBM per GPU (1.0 GiB) does not even hold the framework's 2.1 GiB"),
    ([*PLAN, "--host-dram-gib", "nan"], "--host-dram-gib must be a finite number, got nan"),
    ([*PLAN, "--host-dram-gib", "-1"], "--host-dram-gib must be more than 0, got -1"),
    ([*PLAN, "--pcie-gbps", "nan"], "--pcie-gbps must be a finite number, got nan"),
    ([*PLAN, "--pcie-gbps", "0"], "--pcie-gbps must be more than 0, got 0"),
    ([*PLAN, "--sustained-tflops", "nan"], "--sustained-tflops must be a finite number, got nan"),
    ([*PLAN, "--sustained-tflops=-inf"], "--sustained-tflops must be a finite number, got -inf"),
    # plan: model dimensions
    (["plan", "--nodes", "1", "--layers", "0", "--hidden", "64", "--ffn", "128", "--heads", "4", "--vocab", "100"],
     "--layers must be at least 1, got 0"),
    (["plan", "--nodes", "1", "--layers", "2", "--hidden", "64", "--ffn", "128", "--heads", "4", "--vocab",
      "99999999999"], "--vocab must be at most 16777216, got 99999999999"),
    ([*PLAN, "--head-dim", "-5"], "--head-dim must be at least 0, got -5"),
    ([*PLAN, "--kv-heads", "5"], "heads (32) must be a multiple of kv heads (5)"),
    (["plan", "--nodes", "2", "--hf-config", "/nonexistent/config.json"], "--hf-config /nonexistent/config.json: No such file"),
    # submit
    (["submit", "--nodes", "16", "--scale-in", "1.0", "--dry-run", "tests/fixtures/job.sh"], "--scale-in must be less than 1, got 1.0"),
    (["submit", "--nodes", "0", "--scale-in", "0.5", "--dry-run", "tests/fixtures/job.sh"], "--nodes must be at least 1, got 0"),
    (["submit", "--nodes", "16", "--dry-run", "tests/fixtures/job.sh"], "give --scale-in FRACTION, --candidates N,N or --to-min"),
    (["submit", "--nodes", "4", "--scale-in", "0.5", "--dry-run", "missing.sh"],
     "transit submit: 'missing.sh' cannot be read: No such file or directory"),
    (["submit", "--nodes", "4", "--scale-in", "0.5", "--dry-run", "README.md"],
     "transit submit: 'README.md' is not a batch script: its first line is not #!INTERPRETER"),
    ([*SUBMIT, "--sbatch-arg=--nodes=8-16", "tests/fixtures/job.sh"],
     "--sbatch-arg=--nodes=8-16: the plan sets --nodes (plan counts with --candidates)"),
    ([*SUBMIT, "--sbatch-arg=-N4", "tests/fixtures/job.sh"], "--sbatch-arg=-N4: the plan sets -N (plan counts with --candidates)"),
    ([*SUBMIT, "--sbatch-arg=--export=NONE", "tests/fixtures/job.sh"],
     "--sbatch-arg=--export=NONE: the plan sets --export (for launch)"),
    ([*SUBMIT, "--global-batch", "nan", "tests/fixtures/job.sh"], "--global-batch must be an integer in [1, 1000000000], got 'nan'"),
    ([*SUBMIT, "--tp", "3", "tests/fixtures/job.sh"], "--tp 3 does not divide the 8 GPUs per node"),
    (["submit", "--nodes", "16", "--scale-in", "0.25", "--global-batch", "128", "--dry-run", "tests/fixtures/job.sh"],
     ("global batch 128 cannot be kept on 16,12 nodes: their common multiple is 384, +200.0% (over 25%); nearest "
     "within: --candidates 16,8 (128)")),
    (["submit", "--nodes", "16", "--to-min", "--dry-run", "tests/fixtures/job.sh"],
     "needs a model: --model PRESET, --hf-config JSON, or its dimensions"),
    # launch
    ([*LAUNCH, "--rdzv-port", "-5", "x.py"], "--rdzv-port must be at least 1024, got -5"),
    ([*LAUNCH, "--rdzv-port", "99999", "x.py"], "--rdzv-port must be at most 65535, got 99999"),
    ([*LAUNCH, "--rdzv-port", "80", "x.py"], "--rdzv-port must be at least 1024, got 80"),
    ([*LAUNCH, "--tp", "3", "x.py"], "--tp 3 does not divide the 8 processes per node"),
    (["launch", "--dry-run", "--nodes", "2", "--nproc-per-node", "6", "--tp", "4", "--global-batch", "8", "x.py"],
     "--tp 4 does not divide the 6 processes per node"),
    (["launch", "--dry-run", "--nodes", "2", "--nproc-per-node", "0", "--global-batch", "8", "x.py"],
     "--nproc-per-node must be at least 1, got 0"),
    (["launch", "--dry-run", "--nodes", "0", "--global-batch", "8", "x.py"], "--nodes must be at least 1, got 0"),
    ([*LAUNCH, "--local-batch", "inf", "x.py"], "--local-batch must be an integer in [1, 65536], got 'inf'"),
    ([*LAUNCH, "--pp", "0", "x.py"], "--pp must be at least 1, got 0"),
    # plain ASCII digits only: Python's int() and float() would take these
    ([*PLAN, "--nodes", "8_000"], "--nodes takes plain ASCII digits (no separators), got '8_000'"),
    ([*PLAN, "--global-batch", "1_000"], "--global-batch takes plain ASCII digits (no separators), got '1_000'"),
    ([*PLAN, "--nodes", "\u0668"], "--nodes takes plain ASCII digits (no separators), got '\u0668'"),  # Arabic-Indic 8
    ([*PLAN, "--hbm-gib", "8\uff10"], "--hbm-gib takes plain ASCII digits (no separators), got '8\uff10'"),  # fullwidth 0
    (["plan", "--model", "llama3-8b", "--nodes", "4", "--scale-in", "0.01"],
     "--scale-in 0.01 rounds to all 4 nodes; give more than 0.125 (0.25: 3 nodes)"),
    (["submit", "--nodes", "4", "--scale-in", "0.1", "--dry-run", "tests/fixtures/job.sh"],
     "--scale-in 0.1 rounds to all 4 nodes; give more than 0.125 (0.25: 3 nodes)"),
    ([*LAUNCH, "--seq-len", "512", "x.py"], "--seq-len is passed to TorchTitan only (--torchtitan)"),
    ([*LAUNCH, "--local-batch", "3", "x.py"], "global batch 64 is not divisible by local batch 3 x DP degree 16"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS, ids=[f"{a[0]}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_is_one_line_naming_it(argv, message, capsys, monkeypatch):
    for variable in ("SLURM_JOB_ID", "TRANSIT_GLOBAL_BATCH", "TRANSIT_LOCAL_BATCH", "TRANSIT_CANDIDATES",
                     "TRANSIT_TP", "TRANSIT_PP"):
        monkeypatch.delenv(variable, raising=False)
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert message in err
    prefix = f"transit {argv[0]}: "
    assert err.startswith(prefix) and err.count("\n") == 1
    if "cannot be kept" not in message:  # the refusal names the sets, the one message allowed to be longer
        assert len(err) - len(prefix) - 1 <= 80, err


def test_the_table_has_at_least_40_bad_inputs():
    assert len(BAD_INPUTS) >= 40


@pytest.mark.parametrize("variable, value, message", [
    ("TRANSIT_GLOBAL_BATCH", "abc", "TRANSIT_GLOBAL_BATCH must be an integer in [1, 1000000000], got 'abc'"),
    ("TRANSIT_LOCAL_BATCH", "0", "TRANSIT_LOCAL_BATCH must be at least 1, got 0"),
    ("TRANSIT_CANDIDATES", "16:12:8", ("2 nodes is not a count transit submit planned global batch 64 for "
                                       "(TRANSIT_CANDIDATES=16,12,8)")),
    ("TRANSIT_CANDIDATES", "16:x", "TRANSIT_CANDIDATES must be an integer in [1, 100000], got 'x'"),
    ("TRANSIT_TP", "2", "--tp 1 disagrees with TRANSIT_TP=2, which transit submit planned for this job"),
])
def test_what_submit_passed_is_checked_as_strictly(variable, value, message, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv(variable, value)
    argv = ["launch", "--dry-run", "--nodes", "2", "--nproc-per-node", "8", "--global-batch", "64", "x.py"]
    if variable == "TRANSIT_TP":
        argv.insert(1, "--tp=1")
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_variables_submit_exports_pass_the_plugins_check() -> None:
    """srun inside the job checks the user's TRANSIT_* environment: every variable `transit submit`
    exports for `transit launch` must be one libtransit knows."""
    _native.env_check({variable: "1" for variable in (*launch.PLAN_ENV.values(), launch.CANDIDATES_ENV)})
