"""Child processes that never outlive their parent, with their output in a log file.

Every process rideout starts goes through :class:`ManagedProcess`:

- it runs in a session of its own, so a Ctrl-C at the terminal reaches only the
  supervisor, which then stops children in order (app servers first, Redis last);
- on Linux it asks the kernel for a signal when its parent dies (``PR_SET_PDEATHSIG``;
  SIGTERM unless told otherwise), so even a supervisor killed with SIGKILL leaves
  nothing running;
- its stdout and stderr are merged, written line by line to its log file and handed
  to an optional sink (the supervisor's prefixed console output). The pipe is drained
  for as long as the child lives, whatever happens to the log file (a full disk) or the
  sink (a closed terminal): a child whose pipe fills up blocks on its next write, which
  would freeze it without a trace;
- :meth:`ManagedProcess.stop` sends SIGTERM, waits, then SIGKILLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from rideout.errors import RideoutError

__all__ = ["ManagedProcess", "ProcessError", "pid_alive"]

LineSink = Callable[[str, str], None]  # (process name, line without newline)

_PR_SET_PDEATHSIG = 1


def _die_with_parent(signum: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child between fork and exec
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)

    return preexec


def pid_alive(pid: int) -> bool:
    """True while `pid` names a process that has not exited (zombies count as exited).

    Never for 0 or a negative number, which name process groups to ``kill``, not processes.
    """
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # not Linux: fall back to signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class ProcessError(RideoutError, RuntimeError):
    """A child process failed to start or stopped unexpectedly."""


class ManagedProcess:
    """One child process; see the module docstring for its guarantees."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_file: Path,
        sink: LineSink | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        death_signal: int = signal.SIGTERM,
    ) -> None:
        """`death_signal` is what the kernel sends the child when this process dies."""
        self.name = name
        self.argv = list(argv)
        self.log_file = log_file
        self._sink = sink
        self._env = env
        self._cwd = cwd
        self._death_signal = death_signal
        self._proc: asyncio.subprocess.Process | None = None
        self._pump: asyncio.Task[None] | None = None
        self._tail: deque[str] = deque(maxlen=20)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def tail(self) -> list[str]:
        """The last lines the process printed (for error messages)."""
        return list(self._tail)

    async def start(self) -> None:
        """Spawn the process; its output starts flowing to the log file at once."""
        if self._proc is not None:
            raise ProcessError(f"{self.name} was already started")
        # The log first: a child spawned without a pump to drain its pipe would block.
        try:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            log = self.log_file.open("a", encoding="utf-8", buffering=1)
        except OSError as exc:
            raise ProcessError(f"cannot open {self.name}'s log {self.log_file}: {exc}") from exc
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent(self._death_signal),
            )
        except BaseException as exc:
            log.close()
            if isinstance(exc, OSError):
                raise ProcessError(f"cannot start {self.name} ({self.argv[0]}): {exc}") from exc
            raise
        assert self._proc.stdout is not None
        self._pump = asyncio.create_task(self._copy_output(self._proc.stdout, log))

    async def _copy_output(self, stream: asyncio.StreamReader, log: IO[str]) -> None:
        writing = True
        try:
            while True:
                try:
                    raw = await stream.readline()
                except ValueError:  # a line over the reader's limit, dropped by the reader
                    raw = b"[rideout: a line over 64 KiB was cut]\n"
                if not raw:
                    return
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                self._tail.append(line)
                if writing:
                    try:
                        log.write(line + "\n")
                    except OSError as exc:
                        writing = False
                        self._tail.append(f"[rideout: {self.log_file} cannot be written: {exc}]")
                if self._sink is not None:
                    try:
                        self._sink(self.name, line)
                    except Exception:  # the console is gone: keep the log, drop the echo
                        self._sink = None
        finally:
            with contextlib.suppress(OSError):
                log.close()

    async def wait(self) -> int:
        """Wait for the process to exit and its output to be written; its exit code."""
        if self._proc is None:
            raise ProcessError(f"{self.name} was never started")
        code = await self._proc.wait()
        if self._pump is not None:
            await self._pump
        return code

    def signal(self, signum: int) -> bool:
        """Send `signum` if the process still runs; whether it was sent."""
        if not self.running:
            return False
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError):
            self._proc.send_signal(signum)
            return True
        return False

    async def stop(self, timeout: float = 5.0, *, resend: float = 0.5) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` seconds; the exit code (None if never run).

        SIGTERM is sent again every `resend` seconds: Redis, for one, refuses to exit
        while it writes its initial append-only file and does not retry by itself.
        """
        if self._proc is None:
            return None
        deadline = asyncio.get_running_loop().time() + timeout
        while self.running:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                self.signal(signal.SIGKILL)
                break
            self.signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._proc.wait()), min(resend, remaining))
        return await self.wait()
