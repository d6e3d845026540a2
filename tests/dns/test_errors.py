"""The dns package's exceptions: DnsError above each of them."""

from __future__ import annotations

import pytest

import rideout.dns
from rideout.dns.doh import DohRequestError, parse_name
from rideout.dns.errors import DnsError
from rideout.errors import RideoutError


def test_one_base_for_the_package() -> None:
    assert issubclass(DnsError, RideoutError)
    assert issubclass(DohRequestError, DnsError)
    assert issubclass(DohRequestError, ValueError)  # the DoH endpoint catches ValueError
    assert rideout.dns.DnsError is DnsError


def test_a_refused_query_is_caught_by_the_base() -> None:
    with pytest.raises(DnsError, match="name is required"):
        parse_name("")
