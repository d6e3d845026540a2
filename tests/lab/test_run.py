"""`rideout lab up`'s run, for real (root): a part that fails half-way, or a stop during
start-up, leaves no namespace and no process behind; and the drills' kill and restart of
a part (no root)."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import sys
from pathlib import Path

import pytest

from rideout._process import ManagedProcess
from rideout.lab.deployment import LabDeployment, LabPart, plan_deployment
from rideout.lab.errors import LabError
from rideout.lab.netns import lab_namespaces
from rideout.lab.run import LabParts, run_deployment
from rideout.store.embedded import server_info


def deployment(lab_dir: Path, binary: str) -> LabDeployment:
    return plan_deployment(
        secrets.token_hex(3), lab_dir, redis_server=server_info(binary), python=sys.executable
    )


def processes_of(work: Path) -> list[str]:
    """The command lines of every process on this machine that names `work`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(work) in cmdline and "pytest" not in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def assert_nothing_left(d: LabDeployment) -> None:
    assert not [ns for ns in lab_namespaces() if ns in d.topology.namespaces]
    assert processes_of(d.paths.work) == []
    assert not (d.paths.work.parent / f"{d.topology.lab_id}.json").exists()
    assert not d.paths.control_socket.exists()


async def test_a_part_that_fails_half_way_tears_everything_down(
    lab_dir: Path, redis_tls_binary: str
) -> None:
    d = deployment(lab_dir, redis_tls_binary)
    broken = [
        dataclasses.replace(p, argv=("/bin/sh", "-c", "echo planted failure; exit 3"))
        if p.name == "redis-usw2" else p
        for p in d.parts
    ]  # fmt: skip
    d = dataclasses.replace(d, parts=tuple(broken))
    said: list[str] = []
    with pytest.raises(LabError, match=r"redis-usw2 on redis-usw2 exited with 3.*planted"):
        await run_deployment(d, lab_dir, python=sys.executable, stop=asyncio.Event(),
                             say=said.append, ready_timeout=30)  # fmt: skip
    # the writer was up and the other Redis started when it failed: all stopped
    assert "starting other Redis: replica-use1, redis-usw2, replica-usw2" in said
    assert any(line.startswith("stopped 4 processes") for line in said), said
    assert_nothing_left(d)


async def test_a_stop_during_start_up_tears_everything_down(
    lab_dir: Path, redis_tls_binary: str
) -> None:
    d = deployment(lab_dir, redis_tls_binary)
    stop = asyncio.Event()
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("starting state Redis"):
            stop.set()  # as SIGINT's handler does

    up = await run_deployment(d, lab_dir, python=sys.executable, stop=stop, say=say,
                              ready_timeout=30)  # fmt: skip
    assert up is False
    assert not [line for line in said if line.startswith("starting control plane")]
    assert any(line.startswith("stopped 5 processes") for line in said), said
    assert_nothing_left(d)


async def test_lab_parts_kill_and_restart_in_place(tmp_path: Path) -> None:
    """What a drill's kill and restart do to the list teardown stops (no lab needed: the
    parts are local processes)."""
    part = LabPart("p", "h", "stage", ("sleep", "60"), "redis", 1)
    started: list[ManagedProcess] = []

    async def start(p: LabPart) -> ManagedProcess:
        process = ManagedProcess(p.name, p.argv, log_file=tmp_path / f"{p.name}.log")
        await process.start()
        started.append(process)
        return process

    async def ready(p: LabPart, process: ManagedProcess) -> None:
        assert process.running

    parts = LabParts()
    parts._start, parts._ready = start, ready
    stage: list[ManagedProcess] = [await start(part)]
    parts._add(part, stage, 0)
    try:
        with pytest.raises(LabError, match="still runs: kill it before"):
            await parts.restart(["p"])
        with pytest.raises(LabError, match="no such running part: q"):
            await parts.kill(["p", "q"])
        assert stage[0].running  # nothing killed when one name is unknown
        await parts.kill(["p"])
        assert stage[0].returncode == -9
        await parts.restart(["p"])
        assert stage[0] is started[1]  # teardown stops the new process
        assert stage[0].running
    finally:
        for process in started:
            await process.stop(2)
    assert not any(p.running for p in started)
