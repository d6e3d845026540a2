"""JSON logs: one object a line, with the record's fields, extras and traceback."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable

import pytest

from rideout._logging import JsonFormatter, LogFormat, configure_logging, log_format


def record(**extra: object) -> logging.LogRecord:
    made = logging.LogRecord("rideout.test", logging.WARNING, __file__, 1, "lost %s", ("x",), None)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_record_is_one_json_object() -> None:
    line = JsonFormatter().format(record(region="us-east-1", fence=3, obj=object()))
    data = json.loads(line)
    assert data["level"] == "warning"
    assert data["logger"] == "rideout.test"
    assert data["message"] == "lost x"
    assert (data["region"], data["fence"]) == ("us-east-1", 3)
    assert data["obj"].startswith("<object")
    assert data["ts"].endswith("+00:00")
    assert "\n" not in line


def test_a_traceback_stays_on_the_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        made = record()
        made.exc_info = sys.exc_info()
    data = json.loads(JsonFormatter().format(made))
    assert "RuntimeError: boom" in data["exc"]


def test_the_format_comes_from_the_flag_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RIDEOUT_LOG_FORMAT", raising=False)
    assert log_format(None) == "text"
    monkeypatch.setenv("RIDEOUT_LOG_FORMAT", "json")
    assert log_format(None) == "json"
    assert log_format("text") == "text"
    with pytest.raises(ValueError, match="log format"):
        log_format("yaml")


@pytest.fixture
def configure() -> Callable[[LogFormat], None]:
    """:func:`configure_logging`, undone after the test by tests/conftest.py (every
    test's root handlers and levels are left as found)."""
    return configure_logging


def test_configure_sends_every_logger_through_the_format(
    configure: Callable[[LogFormat], None], capsys: pytest.CaptureFixture[str]
) -> None:
    configure("json")
    logging.getLogger("rideout.test.json").info("started")
    data = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (data["logger"], data["message"]) == ("rideout.test.json", "started")


def test_per_request_lines_of_http_libraries_are_left_out_and_their_warnings_kept(
    configure: Callable[[LogFormat], None], capsys: pytest.CaptureFixture[str]
) -> None:
    configure("text")
    logging.getLogger("httpx").info('HTTP Request: POST http://cp/v1/metrics "200 OK"')
    logging.getLogger("httpx").warning("a warning")
    logging.getLogger("rideout.test.text").info("started")
    lines = capsys.readouterr().err.splitlines()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert [re.fullmatch(stamp + " (.*)", line)[1] for line in lines] == [  # type: ignore[index]
        "WARNING: a warning",
        "INFO: started",
    ]


def test_records_go_to_the_stderr_of_the_moment_not_the_one_at_set_up(
    configure: Callable[[LogFormat], None], capsys: pytest.CaptureFixture[str]
) -> None:
    """A command run in-process (typer's CliRunner swaps sys.stderr, then closes its
    stream) configures logging: a record logged afterwards, from any thread, must not
    hit the closed stream ("--- Logging error --- I/O operation on closed file")."""
    import io
    import sys

    swapped = io.StringIO()
    saved, sys.stderr = sys.stderr, swapped
    try:
        configure("text")
    finally:
        sys.stderr = saved
    swapped.close()
    logging.getLogger("rideout.test").warning("after the command")
    err = capsys.readouterr().err
    assert "after the command" in err
    assert "Logging error" not in err
