"""The DNS-over-HTTPS JSON endpoint: Google's format, cache and CORS headers, bad input."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from rideout.dns.doh import DOH_MEDIA_TYPE, doh_route, parse_name
from rideout.dns.server import DnsMetrics
from tests.conftest import free_port, serving
from tests.dns.conftest import (
    APP,
    PRIMARY,
    SECONDARY,
    SOA_MINIMUM,
    ZONE,
    RecordsResolver,
    StubZone,
)


@pytest_asyncio.fixture
async def client(zone: StubZone, metrics: DnsMetrics) -> AsyncIterator[httpx.AsyncClient]:
    app = Starlette(routes=[doh_route(zone, metrics=metrics)])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://control.test") as c:
        yield c


async def resolve(client: httpx.AsyncClient, **params: str) -> httpx.Response:
    return await client.get("/resolve", params=params)


async def test_a_answer_in_google_json(client: httpx.AsyncClient, zone: StubZone) -> None:
    response = await resolve(client, name=APP, type="A")
    assert response.status_code == 200
    assert response.json() == {
        "Status": 0,
        "TC": False,
        "RD": True,
        "RA": False,
        "AD": False,
        "CD": False,
        "Question": [{"name": APP + ".", "type": 1}],
        "Answer": [
            {"name": APP + ".", "type": 1, "TTL": zone.ttl, "data": address} for address in PRIMARY
        ],
    }
    assert response.headers["content-type"] == DOH_MEDIA_TYPE
    assert response.headers["cache-control"] == f"max-age={zone.ttl}"
    assert response.headers["access-control-allow-origin"] == "*"
    assert zone.asked[-1] == (APP, "A")


async def test_type_defaults_to_a_and_takes_names_and_numbers(
    client: httpx.AsyncClient, zone: StubZone
) -> None:
    for params in ({}, {"type": "a"}, {"type": "1"}, {"type": ""}):
        body = (await resolve(client, name=APP, **params)).json()
        assert body["Question"] == [{"name": APP + ".", "type": 1}]
        assert [a["data"] for a in body["Answer"]] == list(PRIMARY)
    body = (await resolve(client, name=APP, type="28")).json()
    assert body["Question"][0]["type"] == 28
    assert zone.asked[-1] == (APP, "AAAA")


async def test_txt_data_is_the_text_unquoted_like_google(client: httpx.AsyncClient) -> None:
    body = (await resolve(client, name=APP, type="TXT")).json()
    assert body["Answer"] == [{"name": APP + ".", "type": 16, "TTL": 1, "data": "region=us-east-1"}]


async def test_nxdomain_has_the_soa_and_caches_for_the_negative_ttl(
    client: httpx.AsyncClient,
) -> None:
    response = await resolve(client, name="nope." + ZONE)
    body = response.json()
    assert body["Status"] == 3
    assert "Answer" not in body
    assert body["Authority"] == [
        {
            "name": ZONE + ".",
            "type": 6,
            "TTL": 60,
            "data": f"ns1.{ZONE}. hostmaster.{ZONE}. 7 60 30 600 {SOA_MINIMUM}",
        }
    ]
    assert response.headers["cache-control"] == f"max-age={SOA_MINIMUM}"  # min(TTL, minimum)


async def test_nodata_is_status_0_without_answer(client: httpx.AsyncClient) -> None:
    body = (await resolve(client, name=APP, type="AAAA")).json()
    assert body["Status"] == 0
    assert "Answer" not in body
    assert len(body["Authority"]) == 1


async def test_refused_is_status_5_and_not_cached(client: httpx.AsyncClient) -> None:
    response = await resolve(client, name="example.com", type="A")
    assert response.status_code == 200
    body = response.json()
    assert body["Status"] == 5
    assert "Answer" not in body
    assert "Authority" not in body
    assert body["Question"] == [{"name": "example.com.", "type": 1}]
    assert response.headers["cache-control"] == "no-store"


async def test_ns_data_ends_with_a_dot(client: httpx.AsyncClient) -> None:
    body = (await resolve(client, name=ZONE + ".", type="NS")).json()
    assert body["Answer"] == [{"name": ZONE + ".", "type": 2, "TTL": 60, "data": f"ns1.{ZONE}."}]


async def test_the_query_spelling_is_kept(client: httpx.AsyncClient, zone: StubZone) -> None:
    body = (await resolve(client, name="Auction.RIDEOUT.test.")).json()
    assert body["Question"][0]["name"] == "Auction.RIDEOUT.test."
    assert {a["name"] for a in body["Answer"]} == {"Auction.RIDEOUT.test."}
    assert zone.asked[-1] == (APP, "A")


async def test_answers_follow_failover_with_no_cache_in_between(
    client: httpx.AsyncClient, zone: StubZone
) -> None:
    zone.primary_healthy = False
    body = (await resolve(client, name=APP)).json()
    assert [a["data"] for a in body["Answer"]] == list(SECONDARY)
    zone.primary_healthy = True
    body = (await resolve(client, name=APP)).json()
    assert [a["data"] for a in body["Answer"]] == list(PRIMARY)


async def test_a_failing_resolver_is_servfail(client: httpx.AsyncClient, zone: StubZone) -> None:
    zone.fail = True
    response = await resolve(client, name=APP)
    assert response.status_code == 200
    assert response.json()["Status"] == 2
    assert response.headers["cache-control"] == "no-store"


async def test_first_of_repeated_parameters_counts_and_names_ignore_case(
    client: httpx.AsyncClient, zone: StubZone
) -> None:
    response = await client.get(f"/resolve?NAME={APP}&name=example.com&Type=TXT&type=A")
    body = response.json()
    assert body["Question"] == [{"name": APP + ".", "type": 16}]
    assert body["CD"] is False
    assert (await resolve(client, name=APP, cd="1")).json()["CD"] is True


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({}, "required"),
        ({"name": ""}, "required"),
        ({"name": "a" * 254}, "253"),
        ({"name": "a" * 64 + ".test"}, "63"),
        ({"name": "a..test"}, "empty label"),
        ({"name": ".test"}, "empty label"),
        ({"name": "ελ.test"}, "punycode"),
        ({"name": "a b.test"}, "whitespace"),
        ({"name": "a\\046b.test"}, "escape"),
        ({"name": APP, "type": "BOGUS"}, "unknown DNS type"),
        ({"name": APP, "type": "0"}, "out of range"),
        ({"name": APP, "type": "70000"}, "out of range"),
    ],
)
async def test_bad_input_is_400_with_a_json_error(
    client: httpx.AsyncClient, metrics: DnsMetrics, params: dict[str, str], fragment: str
) -> None:
    response = await resolve(client, **params)
    assert response.status_code == 400
    assert fragment in response.json()["error"]
    assert response.headers["access-control-allow-origin"] == "*"
    dropped = metrics.registry.get_sample_value(
        "rideout_dns_dropped_total", {"reason": "doh_bad_request"}
    )
    assert dropped == 1


def test_name_rules() -> None:
    assert parse_name(".") == ()
    assert parse_name("a" * 63 + ".test.") == (b"a" * 63, b"test")
    longest = ".".join(["a" * 63] * 3 + ["a" * 61])  # 253 characters
    assert len(parse_name(longest)) == 4
    assert len(parse_name(longest + ".")) == 4


async def test_preflight_is_answered(client: httpx.AsyncClient) -> None:
    response = await client.options(
        "/resolve",
        headers={"Origin": "http://127.0.1.1:8080", "Access-Control-Request-Method": "GET"},
    )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "*"
    assert "GET" in response.headers["access-control-allow-methods"]


async def test_metrics_count_doh_queries(client: httpx.AsyncClient, metrics: DnsMetrics) -> None:
    await resolve(client, name=APP)
    await resolve(client, name="nope." + ZONE, type="TXT")
    value = metrics.registry.get_sample_value
    assert (
        value("rideout_dns_queries_total", {"qtype": "A", "rcode": "NOERROR", "transport": "doh"})
        == 1
    )
    assert (
        value(
            "rideout_dns_queries_total", {"qtype": "TXT", "rcode": "NXDOMAIN", "transport": "doh"}
        )
        == 1
    )


async def test_served_by_uvicorn_on_a_real_socket(zone: StubZone) -> None:
    app = Starlette(routes=[doh_route(zone, path="/dns-query")])
    port = free_port("127.0.0.1")
    async with serving(app, "127.0.0.1", port), httpx.AsyncClient(trust_env=False) as http:
        response = await http.get(
            f"http://127.0.0.1:{port}/dns-query",
            params={"name": APP, "type": "A"},
            headers={"Accept": DOH_MEDIA_TYPE, "Origin": "http://127.0.1.1"},
        )
    assert response.status_code == 200
    assert response.headers["content-type"] == DOH_MEDIA_TYPE
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["cache-control"] == "max-age=1"
    assert [a["data"] for a in response.json()["Answer"]] == list(PRIMARY)


async def test_the_records_module_answers_through_doh(records_resolver: RecordsResolver) -> None:
    app = Starlette(routes=[doh_route(records_resolver)])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://control.test"
    ) as http:
        response = await http.get("/resolve", params={"name": APP})
        assert [a["data"] for a in response.json()["Answer"]] == list(PRIMARY)
        assert response.headers["cache-control"] == "max-age=1"
        records_resolver.healthy["us-east-1"] = False
        body = (await http.get("/resolve", params={"name": APP, "type": "TXT"})).json()
        assert body["Answer"][0]["data"] == "region=us-west-2 reason=primary-unhealthy"
        body = (await http.get("/resolve", params={"name": APP})).json()
        assert [a["data"] for a in body["Answer"]] == list(SECONDARY)
        body = (await http.get("/resolve", params={"name": APP, "type": "SOA"})).json()
        assert body["Answer"][0]["data"].startswith(f"ns.{APP}. hostmaster.{APP}. 1 ")


async def test_with_a_generation_each_question_is_resolved_once_per_view(
    zone: StubZone, metrics: DnsMetrics
) -> None:
    app = Starlette(routes=[doh_route(zone, metrics=metrics, generation=zone.generation)])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://control.test"
    ) as c:

        async def data() -> list[str]:
            body = (await resolve(c, name=APP.upper(), type="A")).json()
            assert body["Question"] == [{"name": APP.upper() + ".", "type": 1}]
            return sorted(a["data"] for a in body["Answer"])

        for _ in range(5):
            assert await data() == sorted(PRIMARY)
        assert zone.asked.count((APP, "A")) == 1
        zone.primary_healthy = False  # a new view: resolved again
        assert await data() == sorted(SECONDARY)
        assert zone.asked.count((APP, "A")) == 2
    value = metrics.registry.get_sample_value
    assert value("rideout_dns_answers_total", {"transport": "doh", "path": "cache"}) == 4
    assert value("rideout_dns_answers_total", {"transport": "doh", "path": "full"}) == 2
