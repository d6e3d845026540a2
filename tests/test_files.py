"""create_exclusively: several processes may race to create a file; exactly one wins."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from rideout._files import create_exclusively, replace_atomically


def test_creates_a_private_file_with_the_data(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    assert create_exclusively(path, b"data") is True
    assert path.read_bytes() == b"data"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["secret"]  # the temp file is gone


def test_an_existing_file_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"first")
    assert create_exclusively(path, b"second") is False
    assert path.read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["secret"]


def test_racing_threads_leave_one_winner_and_its_whole_data(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    won: list[bytes] = []
    start = threading.Barrier(8)

    def race(data: bytes) -> None:
        start.wait()
        if create_exclusively(path, data):
            won.append(data)

    threads = [threading.Thread(target=race, args=(bytes([i]) * 4096,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert path.read_bytes() == won[0]
    assert os.listdir(tmp_path) == ["secret"]


@pytest.mark.parametrize("code", [errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS])
def test_without_hard_links_it_falls_back_to_an_exclusive_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # A filesystem without hard links cannot be mounted here, so os.link fails the way
    # it does on one; everything else is real.
    def no_links(src: Any, dst: Any) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "secret"
    assert create_exclusively(path, b"data") is True
    assert create_exclusively(path, b"other") is False
    assert path.read_bytes() == b"data"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["secret"]


def test_other_link_errors_are_raised_and_leave_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(src: Any, dst: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "link", no_space)
    with pytest.raises(OSError, match="No space left"):
        create_exclusively(tmp_path / "secret", b"data")
    assert os.listdir(tmp_path) == []


def test_a_missing_directory_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        create_exclusively(tmp_path / "missing" / "secret", b"data")


def test_replace_atomically_swaps_the_whole_file_and_keeps_it_private(tmp_path: Path) -> None:
    path = tmp_path / "ring"
    path.write_bytes(b"old")
    path.chmod(0o644)
    replace_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["ring"]


def test_replace_atomically_leaves_no_temp_file_when_it_fails(tmp_path: Path) -> None:
    target = tmp_path / "a-directory"
    target.mkdir()
    (target / "inside").touch()
    with pytest.raises(IsADirectoryError):
        replace_atomically(target, b"data")  # a file cannot replace a non-empty directory
    assert sorted(os.listdir(tmp_path)) == ["a-directory"]
