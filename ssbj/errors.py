"""One exception root, split into transient (retry may help) and terminal (it will not)."""

from __future__ import annotations


class SSBJError(Exception):
    """Root of every error raised by ssbj."""


class TransientError(SSBJError):
    """A failure that may go away on retry (a service is unreachable, a lock timed out)."""


class TerminalError(SSBJError):
    """A failure that retrying cannot fix (bad configuration, bad input, a broken invariant)."""


class ConfigError(TerminalError):
    """A configuration or command-line value is invalid."""


class StateError(TerminalError):
    """An object used out of order, or a run not in the state a step needs (not for configuration)."""


class InputError(TerminalError):
    """An input file or column is missing or has an unusable type."""


class CheckpointError(TerminalError):
    """A checkpoint is missing, incomplete or does not match the operator."""
