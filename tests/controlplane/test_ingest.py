"""POST /v1/metrics on a real control plane: only a region's signed canary gets in.

Every refused post carries zeros for us-east-1 (what failed the region over in the
issue's attack); after each, nothing is stored and no alarm moved.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from rideout.config import Config
from rideout.controlplane.app import create_app
from rideout.controlplane.runtime import ControlPlane
from rideout.health.canary import ProbeResult, metric_data
from tests.conftest import serving

P, S = "us-east-1", "us-west-2"


def zeros(region: str = P, zones: tuple[str, ...] = ("use1-az1", "use1-az2")) -> bytes:
    now = time.time()
    body = metric_data([ProbeResult(region, z, False, 0.01, "down", now) for z in zones])
    return json.dumps(body).encode()


@dataclass
class Running:
    config: Config
    plane: ControlPlane
    http: httpx.AsyncClient

    def state(self) -> dict[str, Any]:
        """What a refused post must not change: stored points and every alarm's state."""
        return {
            "points": {r: len(p) for r, p in self.plane.canary_history(3600).items()},
            "alarms": {n: (a.state, len(a.history)) for n, a in self.plane.alarms.items()},
        }

    def signed(self, region: str, body: bytes, **kw: Any) -> dict[str, str]:
        from rideout.auth.canary_keys import load_or_create_canary_key
        from rideout.auth.request_signing import RequestSigner

        signer = RequestSigner(
            region, load_or_create_canary_key(self.config.keys_dir, region), **kw
        )
        return {**signer.headers("POST", "/v1/metrics", body), "Content-Type": "application/json"}


@pytest.fixture
async def running(make_config: Callable[..., Config]) -> AsyncIterator[Running]:
    config = make_config()
    plane = ControlPlane(config)
    cp = config.control_plane
    async with (
        serving(create_app(config, runtime=plane), cp.address, cp.port),
        httpx.AsyncClient(trust_env=False, base_url=f"http://{cp.address}:{cp.port}") as http,
    ):
        yield Running(config, plane, http)


async def test_unsigned_and_browser_shaped_posts_change_nothing(running: Running) -> None:
    before = running.state()
    body = zeros()
    json_type = {"Content-Type": "application/json"}
    for headers, status in [
        (json_type, 401),  # no credential at all
        ({"Content-Type": "text/plain"}, 415),  # what a cross-site page can send
        ({"Content-Type": "text/plain", "Origin": "http://evil.example"}, 403),
        ({**json_type, "Origin": "http://evil.example"}, 403),
        ({**json_type, "Origin": "null"}, 403),
        ({**json_type, "Sec-Fetch-Site": "cross-site"}, 403),
        ({**json_type, "Sec-Fetch-Mode": "no-cors"}, 403),
        ({}, 415),  # no Content-Type
    ]:
        answer = await running.http.post("/v1/metrics", content=body, headers=headers)
        assert answer.status_code == status, (headers, answer.text)
        assert set(answer.json()) == {"error", "message"}
    assert running.state() == before


async def test_forged_stale_replayed_and_other_region_posts_change_nothing(
    running: Running,
) -> None:
    from rideout.auth.request_signing import RequestSigner

    before = running.state()
    body = zeros()
    good = running.signed(P, body)

    async def post(content: bytes, headers: dict[str, str]) -> httpx.Response:
        return await running.http.post("/v1/metrics", content=content, headers=headers)

    # Signed with a key that is not us-east-1's.
    forged = RequestSigner(P, b"x" * 43).headers("POST", "/v1/metrics", body)
    answer = await post(body, {**forged, "Content-Type": "application/json"})
    assert (answer.status_code, answer.json()["error"]) == (401, "unauthorized")
    assert "bad_signature" in answer.json()["message"]
    # us-west-2's genuine key, claiming to be us-east-1.
    west = running.signed(S, body)
    answer = await post(body, {**west, "X-Rideout-Region": P})
    assert answer.status_code == 401
    # us-west-2's genuine credential, speaking about us-east-1: the datapoints' region.
    answer = await post(body, west)
    assert answer.status_code == 403
    assert "ApiId=us-west-2" in answer.json()["message"]
    # One good datapoint for us-west-2 and one for us-east-1 in the same request.
    mixed = json.loads(zeros(S, ("usw2-az1",)))
    mixed["MetricData"] += json.loads(body)["MetricData"]
    mixed_body = json.dumps(mixed).encode()
    assert (await post(mixed_body, running.signed(S, mixed_body))).status_code == 403
    # Tampered: the body changed after signing (ones instead of zeros), a header changed.
    assert (await post(body.replace(b"0.0", b"1.0"), good)).status_code == 401
    assert (await post(body, {**good, "X-Rideout-Nonce": "0" * 32})).status_code == 401
    # Stale and future timestamps, signed with the right key.
    for offset in (-120.0, 120.0):
        headers = running.signed(P, body, clock=lambda o=offset: time.time() + o)
        answer = await post(body, headers)
        assert answer.status_code == 401
        assert "stale" in answer.json()["message"]
    # Signed for another path.
    from rideout.auth.canary_keys import load_or_create_canary_key

    other = RequestSigner(P, load_or_create_canary_key(running.config.keys_dir, P))
    answer = await post(body, {**other.headers("POST", "/v1/other", body),
                               "Content-Type": "application/json"})  # fmt: skip
    assert answer.status_code == 401
    # Signed, but not strict JSON: a key named twice (which value would a filter see?)
    twice = b'{"MetricData": [], ' + body[1:]
    assert json.loads(twice) == json.loads(body)  # json.loads keeps the last value
    answer = await post(twice, running.signed(P, twice))
    assert (answer.status_code, answer.json()["error"]) == (400, "bad_request")
    assert running.state() == before

    # The genuine request is stored once; the same request again is a replay.
    first = await post(body, good)
    assert first.status_code == 200, first.text
    assert first.json() == {"stored": 2}
    after_one = running.state()
    replay = await post(body, good)
    assert replay.status_code == 401
    assert "replayed" in replay.json()["message"]
    assert running.state() == after_one
    metrics = (await running.http.get("/metrics")).text
    assert 'rideout_control_plane_refused_total{endpoint="put_metrics",reason="replayed"} 1.0' in (
        metrics
    )
