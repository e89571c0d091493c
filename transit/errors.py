"""Errors every subcommand shares."""


class UsageError(Exception):
    """Bad input from the user: the CLI prints it as one line and exits with code 2."""
