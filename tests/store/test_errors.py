"""The store's exceptions: one base under RideoutError, importable from where they were."""

from __future__ import annotations

import pytest

import rideout.store
from rideout.errors import RideoutError
from rideout.store import auction, embedded, errors, replication


def test_one_base_for_everything_the_store_raises() -> None:
    assert issubclass(errors.StoreError, RideoutError)
    for error in (
        errors.StoreUnavailable,
        errors.NotWriter,
        errors.StoreCorrupt,
        replication.ReplicationError,
        embedded.EmbeddedRedisError,
    ):
        assert issubclass(error, errors.StoreError)
    assert issubclass(errors.NotWriter, errors.StoreUnavailable)


@pytest.mark.parametrize("name", ["StoreError", "StoreUnavailable", "NotWriter", "StoreCorrupt"])
def test_the_auction_module_still_exports_them(name: str) -> None:
    assert getattr(auction, name) is getattr(errors, name)
    assert name in auction.__all__


def test_the_package_exports_its_base() -> None:
    assert rideout.store.StoreError is errors.StoreError
