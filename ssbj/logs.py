"""Structured log fields: a human message, plus the fields as data on the record.

Code logs ``log.info("batch %d: %d records", b, n, extra=fields(batch_id=b, records_in=n))``;
the fields travel as ``record.ssbj_fields`` (for log shippers and tests), and
:class:`FieldsFormatter` (used by ``ssbj run --log-level``) prints them as one JSON object
after the message. Every ssbj logger is named ``ssbj.*``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

FIELDS = "ssbj_fields"


def fields(**values: Any) -> dict[str, Any]:
    """Return ``extra=`` for a log call that carries ``values`` as structured fields."""
    return {FIELDS: values}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """Return the structured fields of ``record`` (empty when it has none)."""
    found = getattr(record, FIELDS, None)
    return found if isinstance(found, dict) else {}


class FieldsFormatter(logging.Formatter):
    """``<time> <logger> <level> <message> {fields as JSON}``."""

    def format(self, record: logging.LogRecord) -> str:
        """Format the message, then append the record's fields, if any, as one JSON object."""
        line = super().format(record)
        extra = record_fields(record)
        return f"{line} {json.dumps(extra, default=float)}" if extra else line
