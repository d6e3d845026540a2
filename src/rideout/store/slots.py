"""Redis Cluster's hash slots: which slot a key lives in, and which keys a call spans.

A cluster splits the key space into 16,384 slots; a key's slot is the CRC16 (XMODEM) of
its *hash tag* modulo 16,384, where the tag is what lies between the key's first ``{``
and the first ``}`` after it, when that is not empty; otherwise the whole key. A script
or a multi-key command may only touch keys of one slot (else ``CROSSSLOT``), which is
why :mod:`rideout.store.keys` gives a room's keys, a user's and a waiting-room event's a
tag each. This module is the cluster specification's rule, pure, so tests and tools can
prove which of rideout's calls a cluster would refuse (issue #31); it is checked against
a real server's ``CLUSTER KEYSLOT``.
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Iterable
from importlib import resources
from typing import Final

__all__ = ["SLOTS", "hash_tag", "key_slot", "slot_tags", "slots_of"]

SLOTS: Final = 16384
"""How many hash slots a Redis (or Valkey) cluster has."""


def _bytes(key: str | bytes) -> bytes:
    return key.encode() if isinstance(key, str) else key


def hash_tag(key: str | bytes) -> bytes:
    """What a cluster hashes for `key`: its non-empty ``{tag}``, else the whole key
    (a ``str`` is taken as UTF-8, as redis-py sends it)."""
    raw = _bytes(key)
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            return raw[start + 1 : end]
    return raw


def key_slot(key: str | bytes) -> int:
    """The hash slot of `key` (0 to 16,383), as ``CLUSTER KEYSLOT`` answers."""
    # binascii.crc_hqx with 0 as the start value is CRC-16/XMODEM, the cluster's CRC16.
    return binascii.crc_hqx(hash_tag(key), 0) % SLOTS


def slots_of(keys: Iterable[str | bytes]) -> frozenset[int]:
    """The slots `keys` span: a call that names them runs on a cluster only when
    this has at most one member."""
    return frozenset(key_slot(key) for key in keys)


@functools.cache
def slot_tags() -> tuple[str, ...]:
    """A hash tag for each slot (``slot_tags()[slot]``): the first string of
    ``[0-9a-z]`` that hashes to it, shortest first (1 to 4 characters). The same in
    every process and version, so a key made with ``{tag}`` names the same slot
    everywhere. Read from ``slot_tags.txt`` beside this module, a table that
    tests/store/test_slots.py makes again by that search (~50 ms, too long for an app
    server's event loop) and checks against a real server's ``CLUSTER KEYSLOT``."""
    tags = tuple(resources.files(__package__).joinpath("slot_tags.txt").read_text().split())
    if len(tags) != SLOTS:  # pragma: no cover - a damaged install
        raise RuntimeError(f"slot_tags.txt holds {len(tags)} tags, not {SLOTS}: reinstall rideout")
    return tags
