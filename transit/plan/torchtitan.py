"""The installed TorchTitan's configuration names, read from its config classes.

`transit launch --framework torchtitan` passes the batch and parallelism settings as TorchTitan
command-line overrides, whose names changed between releases:

- 0.1.0-0.2.2: a root `JobConfig` (`torchtitan.config_manager` in 0.1.0, `torchtitan.config` in
  0.2.x); the job is configured by `--job.config_file FILE.toml`.
- 0.3.0: per-model config registries, `--module NAME --config FUNCTION`; the sections are the
  `TrainingConfig` and `ParallelismConfig` classes of `torchtitan.config`.
- Both count batches in sequences: `training.global_batch_size`, `training.local_batch_size`.
  TorchTitan's main branch since PR 4121 counts tokens instead: `training.num_tokens_per_train_step`
  and `training.num_tokens_per_microbatch_per_dp_rank`, with `training.max_context_length`.

The names come from the dataclass fields of the installed package, never from its version number.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
from dataclasses import dataclass

from transit.errors import UsageError

# (global batch, local batch) field pairs of the training section, in sequences or in tokens
SEQUENCE_FIELDS = ("global_batch_size", "local_batch_size", "seq_len")
TOKEN_FIELDS = ("num_tokens_per_train_step", "num_tokens_per_microbatch_per_dp_rank", "max_context_length")
PARALLELISM_FIELDS = ("tensor_parallel_degree", "pipeline_parallel_degree", "data_parallel_shard_degree",
                      "data_parallel_replicate_degree", "context_parallel_degree")
# how the job names its configuration: a TOML file, or a module's config registry function
TOML_ARGS = ("--job.config_file",)
REGISTRY_ARGS = ("--module", "--config")


@dataclass(frozen=True)
class TitanNames:
    """What one TorchTitan version calls the settings `transit launch` passes."""

    version: str
    loader: str  # "toml" (--job.config_file) or "registry" (--module/--config)
    unit: str  # "sequences" or "tokens": what the batch fields count
    global_batch: str  # e.g. "training.global_batch_size"
    local_batch: str
    seq_len: str
    tp: str
    pp: str
    dp_shard: str
    dp_replicate: str
    cp: str

    def flags(self, global_batch: int, local_batch: int, tp: int, pp: int, seq_len: int | None,
              dp_shard: int) -> list[str]:
        """Overrides for a global batch and a per-rank micro-batch, both in sequences, and the degrees
        launch derives (the data-parallel shard degree fills what TP, PP and the fixed degrees leave)."""
        if self.unit == "tokens":
            if seq_len is None:
                raise UsageError(f"TorchTitan {self.version} counts batches in tokens: give --seq-len")
            global_batch, local_batch = global_batch * seq_len, local_batch * seq_len
        flags = [f"--{self.global_batch}={global_batch}", f"--{self.local_batch}={local_batch}"]
        if seq_len is not None:
            flags.append(f"--{self.seq_len}={seq_len}")
        return [*flags, f"--{self.tp}={tp}", f"--{self.pp}={pp}", f"--{self.dp_shard}={dp_shard}"]

    def fixed_degrees(self, program: list[str]) -> dict[str, int]:
        """The data-parallel replicate and context-parallel degrees the job fixes (its arguments, else
        its TOML file's [parallelism]; 1 where neither says), which launch keeps at every node count."""
        given = _program_options(program)
        section: dict = {}
        if self.loader == "toml" and TOML_ARGS[0] in given:
            section = _toml_section(given[TOML_ARGS[0]], "parallelism")
        degrees = {}
        for key, name in (("dp_replicate", self.dp_replicate), ("cp", self.cp)):
            field = name.split(".", 1)[1]
            text = given.get(f"--{name}", section.get(field, 1))
            try:
                degrees[key] = int(str(text), 10)
            except ValueError:
                raise UsageError(f"--{name} must be an integer, got {text!r}") from None
            if degrees[key] < 1:
                raise UsageError(f"--{name} must be at least 1, got {text}")
        return degrees

    def check_program(self, program: list[str]) -> None:
        """The user's TorchTitan arguments name the configuration the way this version reads it:
        0.3.0 needs --module and --config; earlier releases know neither (and read --job.config_file).
        They do not set what launch sets (TorchTitan would take the later value, silently)."""
        options = _program_options(program)
        given = {name.replace("-", "_") for name in options}
        owned = [f"--{n}" for n in (self.global_batch, self.local_batch, self.seq_len, self.tp, self.pp, self.dp_shard)]
        clash = next((name for name in options if name in owned), None)
        if clash is not None:
            raise UsageError(f"{clash} is set by transit launch (from the plan or its options); leave it out")
        named = [arg for arg in REGISTRY_ARGS if arg.replace("-", "_") in given]
        if self.loader == "registry" and len(named) < len(REGISTRY_ARGS):
            raise UsageError(f"TorchTitan {self.version} needs --module NAME --config FUNCTION "
                             "(it has no --job.config_file)")
        if self.loader == "toml" and named:
            raise UsageError(f"TorchTitan {self.version} has no {'/'.join(named)}: "
                             "configure it with --job.config_file FILE.toml")


def names_from_fields(version: str, loader: str, training: set[str], parallelism: set[str]) -> TitanNames:
    """The names for a TorchTitan whose training and parallelism sections have these fields."""
    for unit, fields in (("sequences", SEQUENCE_FIELDS), ("tokens", TOKEN_FIELDS)):
        if set(fields) <= training:
            break
    else:
        raise UsageError(f"TorchTitan {version}: its training config has neither "
                         f"{'/'.join(SEQUENCE_FIELDS[:2])} nor {'/'.join(TOKEN_FIELDS[:2])}")
    missing = [f"parallelism.{name}" for name in PARALLELISM_FIELDS if name not in parallelism]
    if missing:
        raise UsageError(f"TorchTitan {version}: its config has no {', '.join(missing)}")
    global_batch, local_batch, seq_len = (f"training.{name}" for name in fields)
    tp, pp, dp_shard, dp_replicate, cp = (f"parallelism.{name}" for name in PARALLELISM_FIELDS)
    return TitanNames(version, loader, unit, global_batch, local_batch, seq_len, tp, pp, dp_shard, dp_replicate, cp)


def _program_options(program: list[str]) -> dict[str, str]:
    """--name=value and --name value pairs of the TorchTitan arguments (a bare flag maps to "")."""
    options = {}
    for i, arg in enumerate(program):
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            following = program[i + 1] if i + 1 < len(program) else ""
            options[name] = value if eq else ("" if following.startswith("--") else following)
    return options


def _toml_section(path: str, section: str) -> dict:
    import tomllib

    try:
        with open(path, "rb") as file:
            table = tomllib.load(file)
    except OSError as exc:
        raise UsageError(f"--job.config_file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--job.config_file {path} is not TOML: {exc}") from None
    value = table.get(section, {})
    return value if isinstance(value, dict) else {}


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def installed() -> TitanNames:
    """Read the names from the TorchTitan this Python imports; one line if there is none."""
    try:
        version = importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        raise UsageError("TorchTitan is not installed in this Python (pip install torchtitan)") from None
    for module_name in ("torchtitan.config", "torchtitan.config_manager"):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith("torchtitan"):
                raise UsageError(f"TorchTitan {version} cannot be imported: no module {exc.name!r}") from None
            continue
        root = getattr(module, "JobConfig", None)
        if root is not None:  # 0.1.0-0.2.2: one root dataclass with a section per field
            sections = {f.name: f.default_factory for f in dataclasses.fields(root)
                        if f.default_factory is not dataclasses.MISSING}
            return names_from_fields(version, "toml", _field_names(sections["training"]),
                                     _field_names(sections["parallelism"]))
        if hasattr(module, "TrainingConfig") and hasattr(module, "ParallelismConfig"):
            return names_from_fields(version, "registry", _field_names(module.TrainingConfig),
                                     _field_names(module.ParallelismConfig))
    raise UsageError(f"TorchTitan {version}: found no JobConfig or TrainingConfig/ParallelismConfig classes")
