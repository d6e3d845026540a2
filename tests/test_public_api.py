"""The curated public API: everything in an __all__ exists, nothing private leaks."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import rideout

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(rideout.__path__, "rideout.")
    if not m.name.endswith("__main__")
)


def test_top_level_api() -> None:
    assert set(rideout.__all__) == {"Config", "ConfigError", "__version__", "load_config"}
    for name in rideout.__all__:
        assert hasattr(rideout, name)


def test_the_walk_sees_every_package() -> None:
    # pkgutil skips a directory without __init__.py, and every module in it, silently.
    root = Path(rideout.__file__).parent
    for directory in {p.parent for p in root.rglob("*.py")}:
        assert (directory / "__init__.py").is_file(), f"{directory} has no __init__.py"
    assert "rideout.realtime.connection" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_every_all_is_importable_and_public(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    private = any(part.startswith("_") for part in name.split("."))
    if exported is None:
        # A private module's names reach users only through a public module's __all__.
        assert private, f"{name} is public but has no __all__"
        return
    assert len(set(exported)) == len(exported), f"{name}.__all__ has duplicates"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names {attr}, which does not exist"
        assert not attr.startswith("_") or attr == "__version__", (
            f"{name}.__all__ exports private {attr}"
        )


CLIENT_API = {
    # errors
    "ClientError",
    # the failover HTTP client and the retry state machine that drives it
    "DEFAULT_SCHEDULE", "IDEMPOTENCY_KEY_HEADER", "Action", "AllAttemptsFailed",
    "AsyncFailoverClient", "Attempt", "ClientMetrics", "DomainPlan", "Done", "ErrorKind",
    "Fail", "FailoverClient", "GiveUpReason", "Outcome", "RetryBudgetExhausted",
    "RetryPolicy", "RetryRateAlarm", "RetryRateAlert", "RetryState", "Send", "Sleep",
    "UnknownGeoError", "classify", "is_retryable", "parse_retry_after",
    # name resolution
    "CachingResolver", "DohResolver", "NameserverResolver", "ResolutionError",
    "ResolutionFailure", "Resolved", "Resolver", "SystemResolver",
    # the WebSocket client: driver, settings, metrics, the events to match on, its errors
    "Acked", "AllReconnectsFailed", "AuctionClient", "AuctionClientMetrics", "Cause",
    "ClientClosed", "ClientSettings", "ClientStats", "Connected", "Disconnected", "Event",
    "EventStream", "GaveUp", "HeartbeatFailed", "QueueFull", "ReconnectScheduled",
    "RegionChanged", "StateRestored", "TokenProvider", "Updated",
}  # fmt: skip


def test_client_api_is_pinned_and_each_name_is_its_modules_own() -> None:
    import rideout.client as client

    assert set(client.__all__) == CLIENT_API
    assert set(dir(client)) >= CLIENT_API
    for name in CLIENT_API:
        value = getattr(client, name)
        owner = importlib.import_module(f"rideout.client.{client._MODULES[name]}")
        assert value is getattr(owner, name), name
        assert name in owner.__all__, name
    with pytest.raises(AttributeError, match="no attribute 'Nonesuch'"):
        client.Nonesuch  # noqa: B018


def test_importing_the_client_package_is_cheap() -> None:
    # The names are imported on first use: the package alone loads no client stack.
    code = (
        "import sys, rideout.client\n"
        "heavy = {'httpx', 'httpcore', 'websockets', 'dns', 'redis', 'starlette'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert loaded == "[]"
