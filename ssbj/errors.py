"""One exception root, split into transient (retry may help) and terminal (it will not).

Which class to raise (as dlt splits its exceptions): :class:`ConfigError` only for a value of
the job file, a command-line option or a library argument, with the field or option named;
:class:`StateError` for stored or in-memory state that is not what a step needs;
:class:`CheckpointError` for the operator's checkpoints and saved layouts; :class:`InputError`
for data (files, columns, measurements); :class:`ServiceError` for a database, broker, file
system or Spark query that fails for good; :class:`DependencyError` for a missing extra;
:class:`TransientError` (or a subclass) for anything a retry or a restart may fix.
"""

from __future__ import annotations


class SSBJError(Exception):
    """Root of every error raised by ssbj."""


class TransientError(SSBJError):
    """A failure that may go away on retry (a service is unreachable, a lock timed out)."""


class TerminalError(SSBJError):
    """A failure that retrying cannot fix (bad configuration, bad input, a broken invariant)."""


class ConfigError(TerminalError):
    """A value of the job file, a command-line option or a library argument is invalid."""


class StateError(TerminalError):
    """An object used out of order, or stored state (a run, a sink table or directory) not as a step needs it."""


class InputError(TerminalError):
    """Input data (a file, a column, a set of measurements) is missing or unusable."""


class CheckpointError(TerminalError):
    """A checkpoint is missing, incomplete or does not match the operator."""


class ServiceError(TerminalError):
    """A database, broker, file system or Spark query failed in a way a retry will not fix."""


class DependencyError(TerminalError):
    """An optional package or program that a feature needs is not installed, or failed to run."""
