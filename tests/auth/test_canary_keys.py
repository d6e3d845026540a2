"""The canaries' per-region key files."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from rideout.auth.canary_keys import (
    CanaryKeyError,
    canary_key_path,
    load_canary_keys,
    load_or_create_canary_key,
)
from rideout.errors import InvalidArgument


def test_one_private_key_per_region_created_once(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    east = load_or_create_canary_key(keys, "us-east-1")
    assert load_or_create_canary_key(keys, "us-east-1") == east
    west = load_or_create_canary_key(keys, "us-west-2")
    assert west != east
    assert len(east) >= 32
    path = canary_key_path(keys, "us-east-1")
    assert path.name == "canary-us-east-1.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700


def test_rotation_accepts_the_previous_key(tmp_path: Path) -> None:
    old = load_or_create_canary_key(tmp_path, "us-east-1")
    path = canary_key_path(tmp_path, "us-east-1")
    path.rename(path.with_name(path.name + ".previous"))
    keys = load_canary_keys(tmp_path, ["us-east-1", "us-west-2"])
    new = keys["us-east-1"][0]
    assert new != old
    assert keys["us-east-1"] == (new, old)
    assert len(keys["us-west-2"]) == 1


def test_bad_files_and_names_are_refused(tmp_path: Path) -> None:
    canary_key_path(tmp_path, "us-east-1").write_bytes(b"short")
    with pytest.raises(CanaryKeyError, match="too short"):
        load_or_create_canary_key(tmp_path, "us-east-1")
    with pytest.raises(InvalidArgument):
        canary_key_path(tmp_path, "../admin-token")
