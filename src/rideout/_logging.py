"""Logging for rideout's long-lived processes: plain lines, or one JSON object a line.

``--log-format json`` (or ``RIDEOUT_LOG_FORMAT=json``) is for a platform that collects
and parses logs: each record becomes ``{"ts", "level", "logger", "message", "pid"}``, plus
``exc`` with the traceback when there is one, and any ``extra=`` fields given.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any, Final, Literal

from rideout import _validate

__all__ = ["LOG_FORMATS", "JsonFormatter", "configure_logging", "log_format"]

LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = ("text", "json")
ENV: Final = "RIDEOUT_LOG_FORMAT"

# Plain lines: when (UTC, to the millisecond), how bad, what.
TEXT_FORMAT: Final = "%(asctime)s.%(msecs)03dZ %(levelname)s: %(message)s"
TEXT_DATEFMT: Final = "%Y-%m-%dT%H:%M:%S"

# Libraries that log every request at INFO (httpx: "HTTP Request: POST ... 200 OK"): a
# canary pushes its probes every period, so at INFO they would be most of its log.
QUIET_AT_INFO: Final = ("httpx", "httpcore")

# Attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, str | int | float | bool) else repr(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def log_format(flag: str | None) -> LogFormat:
    """The format asked for: the flag, else ``RIDEOUT_LOG_FORMAT``, else text."""
    value = flag or os.environ.get(ENV) or "text"
    _validate.choice("log format", value, LOG_FORMATS)
    return "json" if value == "json" else "text"


def _utc(formatter: logging.Formatter) -> logging.Formatter:
    formatter.converter = time.gmtime
    return formatter


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record to ``sys.stderr`` as it is then, as :data:`logging.lastResort`
    does: not to the stream it was at set-up, which a command run in-process (a test's
    CLI runner) swaps and closes, and a later record would hit closed."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        return sys.stderr


def configure_logging(fmt: LogFormat, level: int = logging.INFO) -> None:
    """Send every logger's records to stderr in `fmt` (replaces the root's handlers)."""
    handler = _Stderr()
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else _utc(logging.Formatter(TEXT_FORMAT, TEXT_DATEFMT))
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in QUIET_AT_INFO:  # their warnings and errors still come through
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
