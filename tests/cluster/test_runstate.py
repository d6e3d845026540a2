from __future__ import annotations

import os
from pathlib import Path

import pytest

from rideout.cluster.runstate import AlreadyRunning, ProcessRecord, RunLock, RunState, read_lock_pid


def test_lock_is_exclusive_and_names_the_holder(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert read_lock_pid(run_dir) is None
    first = RunLock(run_dir)
    first.acquire()
    assert first.held
    assert read_lock_pid(run_dir) == os.getpid()
    with pytest.raises(AlreadyRunning, match=rf"pid {os.getpid()}.*rideout down") as info:
        RunLock(run_dir).acquire()
    assert info.value.pid == os.getpid()
    first.release()
    assert not first.held
    assert read_lock_pid(run_dir) is None
    second = RunLock(run_dir)
    second.acquire()  # free again
    second.release()
    first.release()  # releasing twice is harmless


def test_a_stale_lock_file_does_not_block(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "up.lock").write_text("999999\n")  # a crashed supervisor's leftovers
    assert read_lock_pid(run_dir) is None
    lock = RunLock(run_dir)
    lock.acquire()
    lock.release()


def test_state_round_trip_and_garbage(tmp_path: Path) -> None:
    state = RunState(
        supervisor_pid=12,
        started_at=1.5,
        config_file="x.toml",
        processes=[
            ProcessRecord("app-a", "app", 34, region="r", zone="z", address="127.0.1.1", port=80)
        ],
    )
    state.write(tmp_path)
    assert RunState.read(tmp_path) == state
    (tmp_path / "up.json").write_text("{not json")
    assert RunState.read(tmp_path) is None
    RunState.remove(tmp_path)
    RunState.remove(tmp_path)
    assert RunState.read(tmp_path) is None
