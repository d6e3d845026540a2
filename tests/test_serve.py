from __future__ import annotations

import logging

from rideout._serve import RedactTokens


def test_tokens_never_reach_the_logs() -> None:
    record = logging.LogRecord(
        "uvicorn.error", logging.INFO, __file__, 1, '%s - "WebSocket %s" [accepted]',
        ("127.0.0.1:5000", "/ws?room=a&token=eyJhbGciOi.payload.sig&x=1"), None,
    )  # fmt: skip
    assert RedactTokens().filter(record)
    assert (
        record.getMessage()
        == '127.0.0.1:5000 - "WebSocket /ws?room=a&token=[redacted]&x=1" [accepted]'
    )
    plain = logging.LogRecord("x", logging.INFO, __file__, 1, "GET /ws?token=abc", None, None)
    RedactTokens().filter(plain)
    assert plain.getMessage() == "GET /ws?token=[redacted]"
    untouched = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "%s tokens=%d", ("mytoken=1", 3), None
    )
    RedactTokens().filter(untouched)
    assert untouched.getMessage() == "mytoken=1 tokens=3"
