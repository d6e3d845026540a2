"""The policy, the predicate, the domain plan and the classification of httpx errors:
pure, no servers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest

from rideout.client import (
    DEFAULT_SCHEDULE,
    DomainPlan,
    ErrorKind,
    FailoverClient,
    RetryPolicy,
    UnknownGeoError,
    is_retryable,
)
from rideout.client.http import classify

# =============================================================== policy and predicate


def test_default_policy_is_seed_001() -> None:
    policy = RetryPolicy()
    assert policy.schedule == DEFAULT_SCHEDULE
    assert policy.schedule.delays == (0, 1, 3, 6, 10)
    assert policy.max_attempts == 5
    assert sum(policy.schedule.delays) == 20
    assert policy.retry_statuses == {500, 502, 503, 504}
    assert policy.retry_methods == {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}
    assert policy.key_methods == {"POST", "PATCH"}
    assert policy.attempt_timeout == 10.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.total_timeout = 5


def test_policy_normalises_and_validates() -> None:
    policy = RetryPolicy(retry_methods={"get", "put"}, retry_statuses=[503])  # type: ignore[arg-type]
    assert policy.retry_methods == frozenset({"GET", "PUT"})
    assert policy.retry_statuses == frozenset({503})
    with pytest.raises(TypeError, match="FixedSchedule"):
        RetryPolicy(schedule=(0, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="total_timeout"):
        RetryPolicy(total_timeout=0)
    with pytest.raises(ValueError, match="attempt_timeout"):
        RetryPolicy(attempt_timeout=float("inf"))
    with pytest.raises(ValueError, match="not an HTTP status"):
        RetryPolicy(retry_statuses=frozenset({1000}))
    with pytest.raises(TypeError, match="bool"):
        RetryPolicy(idempotency_keys=1)  # type: ignore[arg-type]


P = RetryPolicy()
KEY = {"Idempotency-Key": "k-1"}


@pytest.mark.parametrize(
    ("method", "outcome", "headers", "response_headers", "expected"),
    [
        ("GET", 500, None, None, True),
        ("GET", 502, None, None, True),
        ("GET", 503, None, None, True),
        ("GET", 504, None, None, True),
        ("GET", 501, None, None, False),
        ("GET", 200, None, None, False),
        ("GET", 400, None, None, False),
        ("GET", 404, None, None, False),
        ("GET", 409, None, None, False),
        ("GET", 429, None, None, False),  # 429 only with Retry-After
        ("GET", 429, None, {"Retry-After": "3"}, True),
        ("GET", 429, None, {"retry-after": "garbage"}, False),
        ("put", 503, None, None, True),
        ("DELETE", ErrorKind.READ_TIMEOUT, None, None, True),
        ("POST", 503, None, None, False),
        ("POST", 503, KEY, None, True),
        ("PATCH", 503, {"idempotency-key": "x"}, None, True),
        ("POST", 429, KEY, {"Retry-After": "1"}, True),
        ("POST", ErrorKind.READ_TIMEOUT, None, None, False),
        ("POST", ErrorKind.READ_TIMEOUT, KEY, None, True),
        ("POST", ErrorKind.TIMEOUT, None, None, False),
        ("POST", ErrorKind.PROTOCOL_ERROR, None, None, False),
        # The request never left: safe whatever the method.
        ("POST", ErrorKind.DNS_ERROR, None, None, True),
        ("POST", ErrorKind.CONNECT_ERROR, None, None, True),
        ("POST", ErrorKind.CONNECT_TIMEOUT, None, None, True),
        ("POST", "pool_timeout", None, None, True),
        ("GET", ErrorKind.REQUEST_ERROR, None, None, False),
    ],
)
def test_is_retryable(
    method: str,
    outcome: Any,
    headers: dict[str, str] | None,
    response_headers: dict[str, str] | None,
    expected: bool,
) -> None:
    assert is_retryable(method, outcome, headers, P, response_headers) is expected


def test_is_retryable_follows_the_policy() -> None:
    strict = RetryPolicy(retry_unsent=False, retry_statuses=frozenset({503}))
    assert not is_retryable("POST", ErrorKind.CONNECT_ERROR, None, strict)
    assert not is_retryable("GET", 500, None, strict)
    assert is_retryable("GET", 503, None, strict)
    no_ra = RetryPolicy(respect_retry_after=False)
    assert not is_retryable("GET", 429, None, no_ra, {"Retry-After": "1"})
    with pytest.raises(ValueError, match="nonsense"):
        is_retryable("GET", "nonsense", None, P)


# ======================================================================= domain plan

SEED_PLAN = DomainPlan(
    {
        "cn": (
            "https://api.sd-rtn.com",
            "https://api.agora.io",
            "https://api-cn-east-1.sd-rtn.com",
            "https://api-cn-north-1.sd-rtn.com",
        ),
        "overseas": (
            "https://api.agora.io/",
            "https://api.sd-rtn.com",
            "https://api-us-west-1.agora.io",
            "https://api-us-east-1.agora.io",
        ),
    }
)


def test_domain_plan_per_geo() -> None:
    assert SEED_PLAN.for_geo("cn")[0] == "https://api.sd-rtn.com"
    assert SEED_PLAN.for_geo("overseas")[0] == "https://api.agora.io"  # slash dropped
    assert SEED_PLAN.targets("cn", 5) == (
        "https://api.sd-rtn.com",
        "https://api.agora.io",
        "https://api-cn-east-1.sd-rtn.com",
        "https://api-cn-north-1.sd-rtn.com",
        "https://api-cn-north-1.sd-rtn.com",
    )
    with pytest.raises(UnknownGeoError, match=r"unknown geo 'eu'.*'cn', 'overseas'"):
        SEED_PLAN.for_geo("eu")
    with pytest.raises(UnknownGeoError):
        FailoverClient(SEED_PLAN, "eu")
    with pytest.raises(TypeError):
        SEED_PLAN.geos["cn"] = ()  # type: ignore[index]
    assert hash(SEED_PLAN) == hash(DomainPlan(dict(SEED_PLAN.geos)))


def test_domain_plan_order_gives_the_seed_table() -> None:
    # The seed's table retries the primary once before switching; its code does not.
    table = DomainPlan(SEED_PLAN.geos, order=(0, 0, 1, 2, 3))
    urls = SEED_PLAN.for_geo("cn")
    assert table.targets("cn", 5) == (urls[0], urls[0], urls[1], urls[2], urls[3])
    with pytest.raises(ValueError, match="order"):
        DomainPlan(SEED_PLAN.geos, order=(0, 4))


@pytest.mark.parametrize(
    ("geos", "match"),
    [
        ({}, "at least one"),
        ({"x": ()}, "non-empty"),
        ({"x": "http://a"}, "non-empty sequence"),
        ({"x": ("ftp://a",)}, "http"),
        ({"x": ("/relative",)}, "absolute"),
        ({"x": ("http://a/?q=1",)}, "query"),
    ],
)
def test_domain_plan_rejects_bad_input(geos: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DomainPlan(geos)


# ==================================================================== classify


def test_classify_maps_httpx_errors() -> None:
    request = httpx.Request("GET", "http://x")
    assert classify(httpx.ConnectTimeout("t", request=request)) is ErrorKind.CONNECT_TIMEOUT
    assert classify(httpx.ReadTimeout("t", request=request)) is ErrorKind.READ_TIMEOUT
    assert classify(httpx.WriteTimeout("t", request=request)) is ErrorKind.WRITE_TIMEOUT
    assert classify(httpx.PoolTimeout("t", request=request)) is ErrorKind.POOL_TIMEOUT
    assert classify(httpx.ConnectError("refused")) is ErrorKind.CONNECT_ERROR
    assert classify(httpx.ReadError("reset")) is ErrorKind.READ_ERROR
    assert classify(httpx.WriteError("broken")) is ErrorKind.WRITE_ERROR
    assert classify(httpx.RemoteProtocolError("eof")) is ErrorKind.PROTOCOL_ERROR
    assert classify(httpx.LocalProtocolError("bad")) is ErrorKind.REQUEST_ERROR
    assert classify(httpx.UnsupportedProtocol("gopher")) is ErrorKind.REQUEST_ERROR
