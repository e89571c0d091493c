"""The TRANSIT_* environment of a command, checked before it starts by libtransit's own rules
(config.c's table of variables, the one `srun --transit` checks with), and the rule for an
option that a variable also sets: the option wins, and a note says so."""

from __future__ import annotations

from collections.abc import Mapping

from transit import _native

PREFIX = "TRANSIT_"


def check(env: Mapping[str, str]) -> None:
    """Raises UsageError (one line) for the first TRANSIT_* variable that no part of TRANSIT
    reads, naming the closest one, or whose value libtransit would refuse in the task."""
    _native.env_check({k: v for k, v in env.items() if k.startswith(PREFIX)})


def pick(option: str | None, option_name: str, env: Mapping[str, str],
         var: str) -> tuple[str | None, str | None]:
    """The value that applies, the option's over the environment's, and a note (or None) for the
    user when the option overrides a different value from the environment."""
    from_env = env.get(var)
    if option is None:
        return from_env, None
    if from_env is None or from_env == option:
        return option, None
    return option, (f"note: {option_name}={_native.show(option)} overrides {var}='{_native.show(from_env)}' "
                    "from the environment")
