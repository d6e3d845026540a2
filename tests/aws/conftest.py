"""moto in server mode on loopback: real boto3 over real HTTP, fake credentials."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import free_port


@pytest.fixture
def moto_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh moto server (its own port, an empty account) and boto3 pointed at it."""
    from moto.server import ThreadedMotoServer

    port = free_port("127.0.0.1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # moto's backends live in this process, shared by every server it starts: reset
    # them, or one test's resources (and tags of deleted ones) appear in the next.
    httpx.post(f"{endpoint}/moto-api/reset", timeout=10).raise_for_status()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    try:
        yield endpoint
    finally:
        server.stop()
