"""The test ports: each xdist worker has its own block, below the ephemeral range."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import _port_block, free_port


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_the_workers_blocks_are_disjoint_and_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    blocks = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        blocks.append(set(_port_block()))
    assert all(len(block) > 5000 for block in blocks)
    assert not blocks[0] & blocks[1]
    assert not blocks[1] & blocks[2]
    assert not blocks[0] & blocks[2]
    assert max(max(block) for block in blocks) < _ephemeral_low()


def test_a_port_is_not_handed_out_twice_in_a_row() -> None:
    ports = [free_port("127.0.0.1") for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert all(port in _port_block() for port in ports)
