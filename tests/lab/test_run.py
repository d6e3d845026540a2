"""`rideout lab up`'s run, for real (root): a part that fails half-way, or a stop during
start-up, leaves no namespace and no process behind."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import sys
from pathlib import Path

import pytest

from rideout.lab.deployment import LabDeployment, plan_deployment
from rideout.lab.errors import LabError
from rideout.lab.netns import lab_namespaces
from rideout.lab.run import run_deployment
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
