"""Structured logs: one JSON object per line (``snakka serve --log-format json``).

Each line has ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger`` and ``message``;
``exception`` (the formatted traceback) when the record carries one, and ``thread`` when the
record was logged off the main thread. Log shippers (Vector, Fluent Bit, Loki's promtail, ...)
read it without a parsing rule.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime

__all__ = ["JsonFormatter"]


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (never a multi-line record: newlines in the message
    or the traceback are escaped by JSON)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        if record.thread != threading.main_thread().ident and record.threadName:
            out["thread"] = record.threadName
        return json.dumps(out, ensure_ascii=False, default=str)
