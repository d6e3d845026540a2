"""Signed requests, pure: any change to the body or a signed header is refused, and so
are stale, future and replayed requests."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.auth.request_signing import (
    NONCE_HEADER,
    REGION_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    RequestSigner,
    RequestVerifier,
    SignatureError,
    canonical_request,
)
from rideout.errors import InvalidArgument, RideoutError
from tests.conftest import FakeClock

EAST, WEST = b"e" * 43, b"w" * 43
NOW = 1_800_000_000.0
PATH = "/v1/metrics"


def verifier(clock: FakeClock, **kw: object) -> RequestVerifier:
    return RequestVerifier({"us-east-1": [EAST], "us-west-2": [WEST]}, clock=clock, **kw)  # type: ignore[arg-type]


def signed(
    body: bytes, region: str = "us-east-1", secret: bytes = EAST, at: float = NOW
) -> dict[str, str]:
    return RequestSigner(region, secret, clock=lambda: at).headers("POST", PATH, body)


def reason(check: RequestVerifier, headers: dict[str, str], body: bytes, **kw: str) -> str:
    with pytest.raises(SignatureError) as caught:
        check.verify(kw.get("method", "POST"), kw.get("path", PATH), headers, body)
    assert caught.value.status in (401, 503)
    assert isinstance(caught.value, RideoutError)
    return caught.value.reason


@given(st.binary(max_size=2048))
def test_a_signed_body_verifies_once(body: bytes) -> None:
    check = verifier(FakeClock(NOW))
    headers = signed(body)
    assert check.verify("POST", PATH, headers, body) == "us-east-1"
    assert reason(check, headers, body) == "replayed"


@given(st.binary(max_size=512), st.binary(max_size=512))
def test_any_other_body_is_refused(signed_body: bytes, sent_body: bytes) -> None:
    if signed_body == sent_body:
        sent_body += b" "
    assert reason(verifier(FakeClock(NOW)), signed(signed_body), sent_body) == "bad_signature"


HEADER_VALUES = {
    REGION_HEADER: st.sampled_from(["us-west-2", "us-east-2", "eu-west-1"]),
    TIMESTAMP_HEADER: st.floats(NOW - 29, NOW + 29).map(lambda t: f"{t:.6f}"),
    NONCE_HEADER: st.text(string.ascii_letters + string.digits + "_-", min_size=16, max_size=64),
    SIGNATURE_HEADER: st.text("0123456789abcdef", min_size=64, max_size=64),
}


@given(st.data(), st.sampled_from(sorted(HEADER_VALUES)), st.binary(max_size=256))
def test_any_changed_header_is_refused(data: st.DataObject, name: str, body: bytes) -> None:
    headers = signed(body)
    value = data.draw(HEADER_VALUES[name].filter(lambda v: v != headers[name]))
    got = reason(verifier(FakeClock(NOW)), {**headers, name: value}, body)
    assert got in {"bad_signature", "unknown_region"}


@given(st.sampled_from(sorted(HEADER_VALUES)), st.text(max_size=80))
def test_garbled_or_missing_headers_are_refused(name: str, value: str) -> None:
    headers = signed(b"{}")
    check = verifier(FakeClock(NOW))
    missing = {k: v for k, v in headers.items() if k != name}
    assert reason(check, missing, b"{}") == "missing"
    if value != headers[name]:
        assert reason(check, {**headers, name: value}, b"{}") in {
            "malformed", "bad_signature", "unknown_region", "stale",
        }  # fmt: skip


def test_method_path_and_region_are_signed() -> None:
    check = verifier(FakeClock(NOW))
    headers = signed(b"{}")
    assert reason(check, headers, b"{}", method="PUT") == "bad_signature"
    assert reason(check, headers, b"{}", path="/v1/other") == "bad_signature"
    assert reason(check, headers, b"{}", path="/v1/metrics\nx") == "malformed"
    # us-west-2's genuine key cannot speak as us-east-1, nor an unknown region.
    assert reason(check, {**signed(b"{}", "us-west-2", WEST), REGION_HEADER: "us-east-1"},
                  b"{}") == "bad_signature"  # fmt: skip
    assert reason(check, signed(b"{}", "eu-west-1", WEST), b"{}") == "unknown_region"
    assert check.verify("POST", PATH, signed(b"{}", "us-west-2", WEST), b"{}") == "us-west-2"


def test_the_clock_skew_window_and_replays_within_it() -> None:
    clock = FakeClock(NOW)
    check = verifier(clock, max_skew=30.0)
    at_edge = signed(b"a", at=NOW - 30)
    assert check.verify("POST", PATH, at_edge, b"a") == "us-east-1"
    assert reason(check, signed(b"a", at=NOW - 30.001), b"a") == "stale"
    assert reason(check, signed(b"a", at=NOW + 30.001), b"a") == "stale"
    fresh = signed(b"b")
    assert check.verify("POST", PATH, fresh, b"b") == "us-east-1"
    clock.now += 29
    assert reason(check, fresh, b"b") == "replayed"
    clock.now += 2  # the window has passed: refused as stale, and forgotten
    assert reason(check, fresh, b"b") == "stale"
    assert check.verify("POST", PATH, signed(b"c", at=clock.now), b"c") == "us-east-1"
    assert len(check._seen) == 1  # the first two aged out


def test_headers_are_read_case_insensitively_and_the_previous_key_still_works() -> None:
    clock = FakeClock(NOW)
    check = RequestVerifier({"us-east-1": [EAST, b"p" * 43]}, clock=clock)
    lower = {k.lower(): v for k, v in signed(b"x").items()}
    assert check.verify("POST", PATH, lower, b"x") == "us-east-1"
    assert check.verify("POST", PATH, signed(b"x", secret=b"p" * 43), b"x") == "us-east-1"


def test_the_replay_memory_is_bounded() -> None:
    clock = FakeClock(NOW)
    check = verifier(clock, max_remembered=2)
    check.verify("POST", PATH, signed(b"1"), b"1")
    check.verify("POST", PATH, signed(b"2"), b"2")
    third = signed(b"3")
    assert reason(check, third, b"3") == "busy"
    with pytest.raises(SignatureError) as caught:
        check.verify("POST", PATH, third, b"3")
    assert caught.value.status == 503


def test_canonical_request_and_arguments() -> None:
    assert canonical_request("post", PATH, "r", "1.5", "n" * 16, b"") == (
        b"rideout-hmac-sha256-v1\nPOST\n/v1/metrics\nr\n1.5\n" + b"n" * 16 + b"\n"
        b"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    with pytest.raises(InvalidArgument, match="region"):
        RequestSigner("Not A Region", EAST)
    with pytest.raises(InvalidArgument, match="secret"):
        RequestSigner("us-east-1", b"short")
    with pytest.raises(InvalidArgument, match="keys"):
        RequestVerifier({"us-east-1": []})
    with pytest.raises(InvalidArgument, match="max_skew"):
        RequestVerifier({"us-east-1": [EAST]}, max_skew=0)
