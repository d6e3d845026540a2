"""The admin token: created once (0600), shared by every server, compared in constant time."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rideout.auth.admin import (
    ADMIN_TOKEN_FILENAME,
    AdminTokenError,
    check_admin_token,
    load_or_create_admin_token,
)


def test_created_once_private_then_read_back(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    token = load_or_create_admin_token(directory)
    path = directory / ADMIN_TOKEN_FILENAME
    assert len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert load_or_create_admin_token(directory) == token
    assert os.listdir(directory) == [ADMIN_TOKEN_FILENAME]  # no temp file left behind


def test_another_directory_gets_another_token(tmp_path: Path) -> None:
    assert load_or_create_admin_token(tmp_path / "a") != load_or_create_admin_token(tmp_path / "b")


def test_surrounding_whitespace_is_not_part_of_the_token(tmp_path: Path) -> None:
    secret = "s" * 40
    (tmp_path / ADMIN_TOKEN_FILENAME).write_text(f"  {secret}\n")
    assert load_or_create_admin_token(tmp_path) == secret


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"short", "too short to be a secret"), (b"\xff" * 40, "cannot read it")],
    ids=["too-short", "not-ascii"],
)
def test_an_unusable_file_is_an_error_and_kept(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / ADMIN_TOKEN_FILENAME
    path.write_bytes(content)
    with pytest.raises(AdminTokenError, match=problem):
        load_or_create_admin_token(tmp_path)
    assert path.read_bytes() == content


def test_a_directory_that_cannot_be_made_is_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(AdminTokenError, match="cannot create it"):
        load_or_create_admin_token(blocker / "keys")


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer " + "t" * 40, True),
        ("Bearer  " + "t" * 40 + " ", True),
        ("Bearer " + "t" * 39, False),
        ("bearer " + "t" * 40, False),
        ("t" * 40, False),
        ("", False),
        (None, False),
    ],
)
def test_check_admin_token(header: str | None, ok: bool) -> None:
    assert check_admin_token("t" * 40, header) is ok
