"""Logging for `headgate serve`: readable console lines, or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_FIELDS = ("proposal_id", "request_id", "agent", "stage")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `process` names the process when it is not the main one."""

    def __init__(self, process: str | None = None) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if self.process:
            out["process"] = self.process
        for key in _FIELDS:
            if getattr(record, key, None) is not None:
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class ConsoleFormatter(logging.Formatter):
    """Readable lines, ending with the ids of the proposal or request a line concerns."""

    def __init__(self, process: str | None = None) -> None:
        label = f" [{process}]" if process else ""
        super().__init__(f"%(asctime)s %(levelname)-7s %(name)s{label}: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = [f"{k}={getattr(record, k)}" for k in _FIELDS[:2] if getattr(record, k, None)]
        return f"{line} [{' '.join(ids)}]" if ids else line


def setup_logging(fmt: str = "console", level: str = "info", process: str | None = None) -> None:
    """`process` labels every line (the intake workers: their lines share the main process's
    output)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(process) if fmt == "json" else ConsoleFormatter(process))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("nats").setLevel(logging.WARNING)
    logging.getLogger("aiosqlite").setLevel(logging.WARNING)
    logging.getLogger("headgate.notify.faststream").setLevel(logging.WARNING)
