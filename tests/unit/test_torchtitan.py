"""`transit launch --torchtitan` against TorchTitan's own config parser, for the releases it supports.

scripts/torchtitan-versions installs TorchTitan 0.3.0 (the current release) and 0.2.2 (the last one
configured by a TOML file) from PyPI under .cache/torchtitan (CPU only; the first run takes about a
minute). For each, one process runs `transit launch --dry-run --json` there (which reads the
installed TorchTitan's config classes), hands the flags it generated to TorchTitan's ConfigManager,
and resolves the degrees with TorchTitan's ParallelDims, as its trainer does: nothing is trained.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from transit.errors import UsageError
from transit.plan.launch import Launch
from transit.plan.torchtitan import PARALLELISM_FIELDS, names_from_fields

REPO = Path(__file__).resolve().parents[2]
TORCHTITAN_DIR = REPO / ".cache" / "torchtitan"
FIELDS = json.loads((REPO / "tests" / "fixtures" / "plan" / "torchtitan-fields.json").read_text())["versions"]
INSTALL_TIMEOUT_S = 900
PARSE_TIMEOUT_S = 180

# Runs in the TorchTitan venv: transit's launch plan, then TorchTitan's parser on its flags.
DRIVER = r"""
import contextlib, io, json, sys
from transit import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = cli.main(sys.argv[1:])
assert code == 0, code
launch = json.loads(out.getvalue())
command = launch["command"]
titan_args = command[command.index("torchtitan.train") + 1:]

from torchtitan.config import ConfigManager
from torchtitan.distributed import ParallelDims
config = ConfigManager().parse_args(titan_args)
p = config.parallelism
if hasattr(ParallelDims, "from_config"):  # 0.3.0, as its trainer builds them
    dims = ParallelDims.from_config(p, launch["world_size"])
else:  # 0.2.2's train.py
    dims = ParallelDims(dp_shard=p.data_parallel_shard_degree, dp_replicate=p.data_parallel_replicate_degree,
                        cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                        ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree,
                        world_size=launch["world_size"])
print(json.dumps({"launch": launch, "titan_args": titan_args,
                  "parsed": {"global_batch_size": config.training.global_batch_size,
                             "local_batch_size": config.training.local_batch_size,
                             "seq_len": config.training.seq_len, "steps": config.training.steps,
                             "tp": dims.tp, "pp": dims.pp, "dp_shard": dims.dp_shard,
                             "dp_replicate": dims.dp_replicate}}))
"""


@pytest.fixture(scope="module")
def torchtitan_versions() -> Path:
    result = subprocess.run(["bash", str(REPO / "scripts" / "torchtitan-versions")], capture_output=True, text=True,
                            timeout=INSTALL_TIMEOUT_S, check=False)
    assert result.returncode == 0, f"scripts/torchtitan-versions failed:\n{result.stdout}{result.stderr}"
    return TORCHTITAN_DIR


def parse_with_torchtitan(directory: Path, version: str, program: list[str], tmp_path: Path, tp: int = 2,
                          pp: int = 1) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{directory / version}:{REPO}", HOME=str(tmp_path))
    for variable in [v for v in env if v.startswith(("SLURM_", "TRANSIT_"))]:
        del env[variable]
    argv = ["launch", "--dry-run", "--json", "--nodes", "2", "--nproc-per-node", "4", "--torchtitan",
            "--global-batch", "48", "--local-batch", "2", "--tp", str(tp), "--pp", str(pp), "--seq-len", "512", "--",
            *program]
    result = subprocess.run([str(directory / "venv" / "bin" / "python"), "-c", DRIVER, *argv], capture_output=True,
                            text=True, cwd=tmp_path, env=env, timeout=PARSE_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def check_parsed(doc: dict, version: str) -> None:
    assert doc["launch"]["torchtitan"]["version"] == version
    # 2 nodes x 4 ranks, TP 2: DP 4; 48 = local 2 x DP 4 x accumulation 6
    assert (doc["launch"]["dp"], doc["launch"]["grad_accum"]) == (4, 6)
    assert doc["parsed"] == {"global_batch_size": 48, "local_batch_size": 2, "seq_len": 512, "steps": 7, "tp": 2,
                             "pp": 1, "dp_shard": 4, "dp_replicate": 1}
    # TorchTitan's trainer: gradient_accumulation_steps = global // (local x batch degree)
    assert 48 // (2 * doc["parsed"]["dp_shard"] * doc["parsed"]["dp_replicate"]) == doc["launch"]["grad_accum"]


def test_current_release_parses_the_flags(torchtitan_versions, tmp_path):
    doc = parse_with_torchtitan(torchtitan_versions, "0.3.0", ["--module", "llama3", "--config", "llama3_debugmodel",
                                                                "--training.steps=7"], tmp_path)
    assert doc["titan_args"] == ["--module", "llama3", "--config", "llama3_debugmodel", "--training.steps=7",
                                 "--training.global_batch_size=48", "--training.local_batch_size=2",
                                 "--training.seq_len=512", "--parallelism.tensor_parallel_degree=2",
                                 "--parallelism.pipeline_parallel_degree=1",
                                 "--parallelism.data_parallel_shard_degree=4"]
    check_parsed(doc, "0.3.0")


# 2 nodes x 4 ranks = 8: (TP, PP, the job's own arguments) -> DP shard x replicate, accumulation for 48 of 2
@pytest.mark.parametrize("tp, pp, extra, shard, replicate, accumulation", [
    # TorchTitan 0.3.0 refuses PP with its CUDA graphs on: "Set --training.disable_cuda_graphs"
    (1, 2, ["--training.disable_cuda_graphs"], 4, 1, 6),  # pipeline parallel alone
    (2, 2, ["--training.disable_cuda_graphs"], 2, 1, 12),  # TP x PP
    (2, 1, ["--parallelism.data_parallel_replicate_degree=2"], 2, 2, 6),  # HSDP: the replicate degree is kept
])
def test_pipeline_and_fixed_degrees_resolve_as_torchtitan_does(torchtitan_versions, tmp_path, tp, pp, extra, shard,
                                                               replicate, accumulation):
    program = ["--module", "llama3", "--config", "llama3_debugmodel", "--training.steps=7", *extra]
    doc = parse_with_torchtitan(torchtitan_versions, "0.3.0", program, tmp_path, tp=tp, pp=pp)
    assert (doc["launch"]["dp_shard"], doc["launch"]["grad_accum"]) == (shard, accumulation)
    parsed = doc["parsed"]
    assert (parsed["tp"], parsed["pp"], parsed["dp_shard"], parsed["dp_replicate"]) == (tp, pp, shard, replicate)
    assert 48 // (2 * parsed["dp_shard"] * parsed["dp_replicate"]) == accumulation


def test_toml_release_parses_the_flags_over_its_config_file(torchtitan_versions, tmp_path):
    toml = tmp_path / "debug.toml"  # the flags must win over the file, as TorchTitan documents
    toml.write_text('[model]\nname = "llama3"\nflavor = "debugmodel"\n\n[training]\nlocal_batch_size = 8\n'
                    "global_batch_size = 64\nseq_len = 2048\nsteps = 7\n")
    doc = parse_with_torchtitan(torchtitan_versions, "0.2.2", ["--job.config_file", str(toml)], tmp_path)
    assert doc["titan_args"][:2] == ["--job.config_file", str(toml)]
    check_parsed(doc, "0.2.2")


def test_launch_without_torchtitan_says_so_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TRANSIT_"))}
    result = subprocess.run([sys.executable, "-m", "transit", "launch", "--dry-run", "--nodes", "1", "--nproc-per-node",
                             "1", "--global-batch", "1", "--torchtitan", "--", "--module", "llama3"],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "transit launch: TorchTitan is not installed in this Python (pip install torchtitan)\n"


@pytest.mark.parametrize("version, loader, flags", [
    ("0.2.2", "toml", ["--training.global_batch_size=48", "--training.local_batch_size=2", "--training.seq_len=512",
                       "--parallelism.tensor_parallel_degree=2", "--parallelism.pipeline_parallel_degree=1",
                       "--parallelism.data_parallel_shard_degree=4"]),
    ("0.3.0", "registry", ["--training.global_batch_size=48", "--training.local_batch_size=2",
                           "--training.seq_len=512", "--parallelism.tensor_parallel_degree=2",
                           "--parallelism.pipeline_parallel_degree=1", "--parallelism.data_parallel_shard_degree=4"]),
    # the main branch counts tokens: 48 x 512 and 2 x 512
    ("main", "registry", ["--training.num_tokens_per_train_step=24576",
                          "--training.num_tokens_per_microbatch_per_dp_rank=1024",
                          "--training.max_context_length=512", "--parallelism.tensor_parallel_degree=2",
                          "--parallelism.pipeline_parallel_degree=1", "--parallelism.data_parallel_shard_degree=4"]),
])
def test_flags_from_the_captured_config_fields(version, loader, flags):
    fields = FIELDS[version]
    names = names_from_fields(version, loader, set(fields["training"]), set(fields["parallelism"]))
    assert names.flags(global_batch=48, local_batch=2, tp=2, pp=1, seq_len=512, dp_shard=4) == flags


def test_token_counting_torchtitan_needs_the_sequence_length():
    fields = FIELDS["main"]
    names = names_from_fields("main", "registry", set(fields["training"]), set(fields["parallelism"]))
    with pytest.raises(UsageError, match="TorchTitan main counts batches in tokens: give --seq-len"):
        names.flags(global_batch=48, local_batch=2, tp=2, pp=1, seq_len=None, dp_shard=4)


@pytest.mark.parametrize("loader, program, message", [
    ("registry", ["--job.config_file", "x.toml"], "TorchTitan 0.3.0 needs --module NAME --config FUNCTION"),
    ("registry", ["--module=llama3"], "TorchTitan 0.3.0 needs --module NAME --config FUNCTION"),
    ("toml", ["--module", "llama3", "--config", "x"], ("TorchTitan 0.3.0 has no --module/--config: configure it "
                                                       "with --job.config_file FILE.toml")),
])
def test_the_configuration_must_be_named_as_the_version_reads_it(loader, program, message):
    fields = FIELDS["0.3.0"]
    names = names_from_fields("0.3.0", loader, set(fields["training"]), set(fields["parallelism"]))
    with pytest.raises(UsageError, match=message):
        names.check_program(program)


def test_a_torchtitan_without_known_batch_fields_is_refused():
    with pytest.raises(UsageError, match="TorchTitan 9.9: its training config has neither"):
        names_from_fields("9.9", "registry", {"batch_size"}, set(PARALLELISM_FIELDS))


def names_of(version: str, loader: str):
    fields = FIELDS[version]
    return names_from_fields(version, loader, set(fields["training"]), set(fields["parallelism"]))


def test_fixed_degrees_come_from_the_arguments_else_the_toml_file(tmp_path):
    toml = tmp_path / "job.toml"
    toml.write_text("[parallelism]\ndata_parallel_replicate_degree = 2\ncontext_parallel_degree = 2\n")
    names = names_of("0.2.2", "toml")
    assert names.fixed_degrees(["--job.config_file", str(toml)]) == {"dp_replicate": 2, "cp": 2}
    assert names.fixed_degrees(["--job.config_file", str(toml), "--parallelism.context_parallel_degree", "4"]) == \
        {"dp_replicate": 2, "cp": 4}
    assert names_of("0.3.0", "registry").fixed_degrees(["--module", "llama3"]) == {"dp_replicate": 1, "cp": 1}


@pytest.mark.parametrize("program, message", [
    (["--parallelism.data_parallel_shard_degree=8"], ("--parallelism.data_parallel_shard_degree is set by transit "
                                                      "launch (from the plan or its options); leave it out")),
    (["--parallelism.tensor_parallel_degree", "4"], "--parallelism.tensor_parallel_degree is set by transit launch"),
    (["--training.global_batch_size=8"], "--training.global_batch_size is set by transit launch"),
])
def test_the_job_does_not_set_what_launch_sets(program, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        names_of("0.3.0", "registry").check_program(["--module", "llama3", "--config", "x", *program])


def test_a_count_the_fixed_degrees_cannot_tile_is_refused():
    # 3 nodes x 4 ranks = 12 with TP 2 and a fixed replicate degree of 4: 12 / 2 = 6 data-parallel ranks
    # are not a multiple of 4
    launch = Launch(job_id="1", hostnames=("a", "b", "c"), nproc_per_node=4, tp=2, pp=1, global_batch=48,
                    local_batch=1, rdzv_endpoint="a:1", rdzv_port_chosen_on="a", cpus_per_node=None, dp_replicate=4)
    with pytest.raises(UsageError, match=re.escape("3 nodes x 4 processes = 12 ranks are not a multiple of TP x PP "
                                                   "= 2 x DP replicate 4")):
        _ = launch.dp
    with_cp = Launch(job_id="1", hostnames=("a", "b"), nproc_per_node=4, tp=2, pp=1, global_batch=48, local_batch=1,
                     rdzv_endpoint="a:1", rdzv_port_chosen_on="a", cpus_per_node=None, cp=2)
    assert (with_cp.dp, with_cp.dp_shard, with_cp.grad_accum) == (2, 2, 24)  # CP ranks share a batch
