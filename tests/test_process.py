from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rideout._process import ManagedProcess, ProcessError, pid_alive
from tests.conftest import children_die_with_their_parent, until


async def test_output_goes_to_log_sink_and_tail(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    proc = ManagedProcess(
        "echo",
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
        log_file=tmp_path / "logs" / "echo.log",
        sink=lambda name, line: seen.append((name, line)),
    )
    await proc.start()
    assert await proc.wait() == 0
    assert sorted(seen) == [("echo", "err"), ("echo", "out")]
    assert sorted((tmp_path / "logs" / "echo.log").read_text().split()) == ["err", "out"]
    assert sorted(proc.tail()) == ["err", "out"]
    assert not proc.running
    assert proc.returncode == 0


async def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    proc = ManagedProcess("stubborn", [sys.executable, "-c", script], log_file=tmp_path / "s.log")
    await proc.start()
    await until(lambda: "ready" in proc.tail(), interval=0.01)
    pid = proc.pid
    assert pid is not None
    t0 = time.monotonic()
    assert await proc.stop(timeout=0.3) == -signal.SIGKILL
    assert time.monotonic() - t0 < 5
    assert not pid_alive(pid)


async def test_stop_is_graceful_when_the_child_obliges(tmp_path: Path) -> None:
    proc = ManagedProcess("sleeper", ["sleep", "60"], log_file=tmp_path / "s.log")
    await proc.start()
    assert await proc.stop() == -signal.SIGTERM
    assert await proc.stop() == -signal.SIGTERM  # idempotent
    assert proc.signal(signal.SIGTERM) is False


async def test_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    proc = ManagedProcess("ghost", [str(tmp_path / "no-such-binary")], log_file=tmp_path / "g.log")
    with pytest.raises(ProcessError, match="cannot start ghost"):
        await proc.start()
    assert await proc.stop() is None


async def test_start_twice_and_wait_before_start(tmp_path: Path) -> None:
    proc = ManagedProcess("x", ["true"], log_file=tmp_path / "x.log")
    with pytest.raises(ProcessError, match="never started"):
        await proc.wait()
    await proc.start()
    with pytest.raises(ProcessError, match="already started"):
        await proc.start()
    await proc.wait()


def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    """Even a supervisor killed with SIGKILL leaves no child running (PR_SET_PDEATHSIG)."""
    parent = textwrap.dedent(
        f"""
        import asyncio, pathlib
        from rideout._process import ManagedProcess
        async def main():
            p = ManagedProcess("child", ["sleep", "60"], log_file=pathlib.Path({str(tmp_path)!r}) / "c.log")
            await p.start()
            print(p.pid, flush=True)
            await asyncio.sleep(60)
        asyncio.run(main())
        """
    )
    assert len(children_die_with_their_parent(parent)) == 1


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not pid_alive(proc.pid)


def test_pid_alive_is_false_for_process_groups() -> None:
    # os.kill(0, ...) signals the caller's whole process group: a record with no process
    # (pid 0) must never look alive to whoever kills what is alive.
    assert not pid_alive(0)
    assert not pid_alive(-1)


LOTS = "import sys\nfor i in range(20000): print('line', i, 'x' * 40)\nprint('done')"


async def test_a_failing_sink_does_not_stop_the_output_being_drained(tmp_path: Path) -> None:
    """A closed terminal (the sink raises) must not leave the child blocked on a full pipe."""

    def broken(name: str, line: str) -> None:
        raise BrokenPipeError("the terminal is gone")

    proc = ManagedProcess(
        "chatty", [sys.executable, "-c", LOTS], log_file=tmp_path / "c.log", sink=broken
    )
    await proc.start()
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert (tmp_path / "c.log").read_text().splitlines()[-1] == "done"


async def test_a_full_disk_does_not_stop_the_output_being_drained(tmp_path: Path) -> None:
    seen: list[str] = []
    proc = ManagedProcess(
        "chatty",
        [sys.executable, "-c", LOTS],
        log_file=Path("/dev/full"),  # every write fails with ENOSPC
        sink=lambda name, line: seen.append(line),
    )
    await proc.start()
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert (len(seen), seen[-1]) == (20001, "done")  # every line still reaches the sink


async def test_an_over_long_line_does_not_stop_the_output_being_drained(tmp_path: Path) -> None:
    script = "print('x' * 200_000)\n" + LOTS
    proc = ManagedProcess("long", [sys.executable, "-c", script], log_file=tmp_path / "l.log")
    await proc.start()
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    lines = (tmp_path / "l.log").read_text().splitlines()
    assert lines[-1] == "done"
    assert "[rideout: a line over 64 KiB was cut]" in lines


async def test_a_log_that_cannot_be_opened_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    proc = ManagedProcess("x", [sys.executable, "-c", "pass"], log_file=tmp_path / "dir")
    with pytest.raises(ProcessError, match="cannot open x's log"):
        await proc.start()
    assert proc.pid is None
