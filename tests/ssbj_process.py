"""The ``ssbj`` command in a subprocess, optionally told to die at a crash point (``SSBJ_CRASH_AT``)."""

from __future__ import annotations

import os
import subprocess
import sys

SSBJ = [sys.executable, "-m", "ssbj.cli"]


def ssbj(*args: str, crash: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``ssbj ARGS`` with this interpreter for Spark's workers; ``crash``: ``point:batch`` to SIGKILL at."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env.pop("SSBJ_CRASH_AT", None)
    if crash:
        env["SSBJ_CRASH_AT"] = crash
    return subprocess.run([*SSBJ, *args], env=env, capture_output=True, text=True, timeout=timeout)
