"""Key files shared by every process of a deployment (private).

One way to load a secret file, creating it (mode 0600, exclusively: the first process
wins and the others load its content) when it is missing, and to replace it whole. A file
that exists but cannot be used is an error the caller names, never overwritten.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rideout._files import create_exclusively, replace_atomically
from rideout.auth.errors import CredentialError

__all__ = ["Fail", "load_or_create", "publish", "read", "replace", "why"]

T = TypeVar("T")
Fail = Callable[[Path, str], CredentialError]
"""Builds the caller's error from the file's path and what is wrong with it."""


def why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read(path: Path, parse: Callable[[bytes], T], fail: Fail, *, hint: str = "") -> T:
    """Parse the file; FileNotFoundError passes through, other problems are ``fail``'s."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except NotADirectoryError as exc:  # a file where a directory should be: none here
        raise FileNotFoundError(exc.errno, exc.strerror, str(path)) from exc
    except OSError as exc:
        raise fail(path, f"cannot read it: {why(exc)}") from exc
    try:
        return parse(data)
    except ValueError as exc:
        raise fail(path, f"{exc}{hint}") from exc


def publish(
    path: Path, created: tuple[T, bytes], parse: Callable[[bytes], T], fail: Fail, *, hint: str = ""
) -> T:
    """Install ``created`` (the value and its bytes) unless the file exists; the value
    in place: ours, or, when another process got there first, the winner's."""
    value, data = created
    try:
        won = create_exclusively(path, data)
    except OSError as exc:
        raise fail(path, f"cannot create it: {why(exc)}") from exc
    if won:
        return value
    try:
        return read(path, parse, fail, hint=hint)
    except FileNotFoundError:
        raise fail(
            path, "it exists but cannot be opened (a dangling symlink, or removed meanwhile)"
        ) from None


def load_or_create(
    path: Path,
    parse: Callable[[bytes], T],
    generate: Callable[[], tuple[T, bytes]],
    fail: Fail,
    *,
    hint: str = "",
) -> T:
    """The file's value, created by ``generate`` (value, bytes) on first use."""
    try:
        return read(path, parse, fail, hint=hint)
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(path, f"cannot create it: its directory: {why(exc)}") from exc
    return publish(path, generate(), parse, fail, hint=hint)


def replace(path: Path, data: bytes, fail: Fail) -> None:
    """Replace the file whole (mode 0600): a reader sees the old content or the new."""
    try:
        replace_atomically(path, data)
    except OSError as exc:
        raise fail(path, f"cannot replace it: {why(exc)}") from exc
