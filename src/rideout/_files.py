"""Files that several processes may try to create at once: exactly one wins."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["create_exclusively", "replace_atomically"]

# os.link errors meaning "this filesystem has no hard links".
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})


def create_exclusively(path: Path, data: bytes) -> bool:
    """Write `data` to `path` (mode 0600) unless it exists; whether this call created it.

    The data goes to a private temp file, is fsynced, then hard-linked into place, which
    is atomic and fails if another process got there first: a reader never sees a
    partial file. On filesystems without hard links it falls back to an exclusive
    create and one write. Raises OSError when the file cannot be written.
    """
    with _private_copy(path, data) as tmp:
        try:
            os.link(tmp, path)  # atomic, and never replaces an existing file
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            return _create_without_links(path, data)
        _fsync_directory(path.parent)
        return True


def replace_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` (mode 0600), replacing what is there in one step.

    The data goes to a private temp file beside it, is fsynced, then renamed over the
    old file: a reader sees the old content or the new, never a mix. Raises OSError.
    """
    with _private_copy(path, data) as tmp:
        os.replace(tmp, path)
        _fsync_directory(path.parent)


@contextlib.contextmanager
def _private_copy(path: Path, data: bytes) -> Iterator[Path]:
    """`data` in a new fsynced temp file beside `path` (mkstemp makes it mode 0600),
    removed on leaving unless it was moved away meanwhile."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _create_without_links(path: Path, data: bytes) -> bool:
    """Exclusive create, then one write: a racing reader could see an empty file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()  # do not leave a half-written file behind
        raise
    _fsync_directory(path.parent)
    return True


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform/filesystem allows it
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
