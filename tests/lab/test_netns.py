"""Building, faulting and removing a lab: with a recording runner (anywhere), and for
real with the ``lab`` fixture (root only)."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rideout._process import pid_alive
from rideout.lab.errors import LabError
from rideout.lab.faults import Cut
from rideout.lab.netns import Lab, lab_namespaces, require_root, start_in, sweep
from rideout.lab.topology import plan_topology
from tests.conftest import until
from tests.lab.conftest import GROUPS, needs_root, run_on


class Recorder:
    """A runner that records each command and plays `ip netns list` from what it saw."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.commands: list[str] = []
        self.namespaces: list[str] = []
        self.fail_on = fail_on

    def __call__(self, argv: Sequence[str]) -> str:
        argv = tuple(argv)
        line = " ".join(argv)
        self.commands.append(line)
        if self.fail_on and self.fail_on in line:
            raise LabError(f"`{line}` failed (2): planned")
        if argv[:3] == ("ip", "netns", "add"):
            self.namespaces.append(argv[3])
        elif argv[:3] == ("ip", "netns", "del"):
            self.namespaces.remove(argv[3])
        elif argv[:3] == ("ip", "netns", "list"):
            return "".join(f"{ns} (id: {n})\n" for n, ns in enumerate(self.namespaces))
        return ""


def fake_lab(tmp_path: Path, runner: Recorder, euid: int = 0) -> Lab:
    return Lab(plan_topology("t1", GROUPS), tmp_path, runner=runner, euid=lambda: euid)


def test_without_root_it_refuses_and_says_why(tmp_path: Path) -> None:
    runner = Recorder()
    with pytest.raises(LabError, match=r"needs root: .*network namespaces.*CAP_NET_ADMIN"):
        fake_lab(tmp_path, runner, euid=1000).create()
    assert runner.commands == []
    with pytest.raises(LabError, match="needs root"):
        require_root(lambda: 1000)


def test_the_state_names_what_is_made_before_it_is_made(tmp_path: Path) -> None:
    runner = Recorder()
    lab = fake_lab(tmp_path / "lab", runner)
    lab.create()
    state = json.loads(lab.state_file.read_text())
    assert state["namespaces"] == list(lab.topology.namespaces)
    assert state["groups"] == GROUPS
    assert stat.S_IMODE((tmp_path / "lab").stat().st_mode) == 0o700
    assert stat.S_IMODE(lab.state_file.stat().st_mode) == 0o600
    with pytest.raises(LabError, match="already recorded"):
        fake_lab(tmp_path / "lab", runner).create()
    lab.destroy()
    assert runner.namespaces == []
    assert not lab.state_file.exists()


def test_a_failed_step_removes_what_was_made(tmp_path: Path) -> None:
    runner = Recorder(fail_on="type veth")
    lab = fake_lab(tmp_path, runner)
    with pytest.raises(LabError, match="planned"):
        lab.create()
    assert runner.namespaces == []
    assert not lab.state_file.exists()


def test_the_body_raising_still_tears_down(tmp_path: Path) -> None:
    runner = Recorder()
    before = signal.getsignal(signal.SIGTERM)

    def body() -> None:
        with fake_lab(tmp_path, runner):
            assert len(runner.namespaces) == 4
            if before is signal.SIG_DFL:  # SIGTERM would end the process: it raises instead
                assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
            raise RuntimeError("the body failed")

    with pytest.raises(RuntimeError, match="the body"):
        body()
    assert runner.namespaces == []
    assert signal.getsignal(signal.SIGTERM) == before  # restored


def test_faults_are_idempotent_recorded_and_reloaded(tmp_path: Path) -> None:
    runner = Recorder()
    lab = fake_lab(tmp_path, runner)
    lab.create()
    assert lab.partition("east", "west", "a->b") == [Cut("east", "west")]
    assert lab.partition("east", "west") == [Cut("west", "east")]  # only what was missing
    assert lab.partition("east", "west") == []
    assert sum("rule add" in c and "blackhole" in c for c in runner.commands) == 2
    again = Lab.load(tmp_path, "t1", runner=runner, euid=lambda: 0)
    assert again.cuts == [Cut("east", "west"), Cut("west", "east")]
    assert again.heal("west", "east", "a->b") == [Cut("west", "east")]
    assert again.heal_all() == [Cut("east", "west")]
    assert again.heal_all() == []
    assert Lab.load(tmp_path, "t1", runner=runner).cuts == []
    again.destroy()
    with pytest.raises(LabError, match="no lab t1"):
        Lab.load(tmp_path, "t1")


def test_sweep_removes_a_labs_leftovers_by_prefix(tmp_path: Path) -> None:
    runner = Recorder()
    runner.namespaces = ["rdo-t1-router", "rdo-t1-a", "rdo-t2-router", "other"]
    assert sweep("t1", runner=runner) == ["rdo-t1-a", "rdo-t1-router"]
    assert runner.namespaces == ["rdo-t2-router", "other"]
    assert sweep(runner=runner) == ["rdo-t2-router"]
    assert runner.namespaces == ["other"]


# --------------------------------------------------------------------------- real labs

ECHO_SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(({addr!r}, 7000)); s.listen(); print("listening", flush=True)
while True:
    c, peer = s.accept()
    data = c.recv(100)
    c.sendall(data + b" from " + peer[0].encode()); c.close()
"""

UDP_PAIR = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(({me!r}, 7001)); s.settimeout(1.0)
time.sleep(0.5)  # both ends bound before either sends
s.sendto(b"hello", ({peer!r}, 7001))
try:
    print(s.recvfrom(100)[0].decode())
except TimeoutError:
    print("silence")
"""


def connect(lab: Lab, src: str, dst: str, timeout: float = 3.0) -> str:
    addr = lab.topology.host(dst).address
    return run_on(lab, src, textwrap.dedent(f"""
        import socket, time
        t = time.monotonic()
        try:
            c = socket.create_connection(({addr!r}, 7000), timeout={timeout})
            c.sendall(b"ping"); print(c.recv(100).decode())
        except OSError as e:
            print(type(e).__name__, round(time.monotonic() - t, 1))
    """))  # fmt: skip


def udp_both_ways(lab: Lab, a: str, b: str) -> tuple[str, str]:
    """Each of `a` and `b` sends the other a datagram: what each received."""
    procs = [
        subprocess.Popen(
            [
                *lab.exec_argv(me),
                sys.executable,
                "-c",
                UDP_PAIR.format(
                    me=lab.topology.host(me).address, peer=lab.topology.host(peer).address
                ),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for me, peer in ((a, b), (b, a))
    ]
    outs = [p.communicate(timeout=20)[0].strip() for p in procs]
    return outs[0], outs[1]


@needs_root
async def test_tcp_crosses_the_router_and_a_partition_is_silence(lab: Lab, tmp_path: Path) -> None:
    topo = lab.topology
    server = await start_in(
        lab, "c", "echo", [sys.executable, "-c", ECHO_SERVER.format(addr=topo.host("c").address)],
        log_file=tmp_path / "echo.log",
    )  # fmt: skip
    try:
        await until(lambda: "listening" in "".join(server.tail()), 10, message="echo server")
        # a (east) to c (west): through the router, with a's own address as the source
        assert await asyncio.to_thread(connect, lab, "a", "c") == "ping from 127.100.1.1"
        assert await asyncio.to_thread(connect, lab, "b", "c") == "ping from 127.100.1.2"

        lab.partition("east", "west")  # both ways: connect times out, never refused
        started = time.monotonic()
        answer = await asyncio.to_thread(connect, lab, "a", "c", 1.5)
        assert answer.startswith("TimeoutError"), answer
        assert time.monotonic() - started >= 1.4

        lab.heal("east", "west")
        assert await asyncio.to_thread(connect, lab, "a", "c") == "ping from 127.100.1.1"

        lab.partition("a", "c")  # a host alone: b still reaches c
        assert (await asyncio.to_thread(connect, lab, "a", "c", 1.0)).startswith("TimeoutError")
        assert await asyncio.to_thread(connect, lab, "b", "c") == "ping from 127.100.1.2"
        assert lab.heal_all() == [Cut("a", "c"), Cut("c", "a")]
        assert await asyncio.to_thread(connect, lab, "a", "c") == "ping from 127.100.1.1"
    finally:
        await server.stop()


@needs_root
async def test_a_one_way_partition_drops_one_direction(lab: Lab) -> None:
    assert await asyncio.to_thread(udp_both_ways, lab, "a", "c") == ("hello", "hello")
    lab.partition("east", "c", "a->b")  # east's packets to c are dropped, c's still arrive
    a_got, c_got = await asyncio.to_thread(udp_both_ways, lab, "a", "c")
    assert (a_got, c_got) == ("hello", "silence")
    state = json.loads(lab.state_file.read_text())
    assert state["cuts"] == [{"src": "east", "dst": "c"}]
    lab.heal("east", "c", "a->b")
    assert await asyncio.to_thread(udp_both_ways, lab, "a", "c") == ("hello", "hello")


@needs_root
def test_teardown_leaves_no_namespace_veth_or_process(lab_dir: Path) -> None:
    topology = plan_topology(secrets.token_hex(3), GROUPS)
    links_before = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    lab = Lab(topology, lab_dir)
    started: list[subprocess.Popen[bytes]] = []

    def body() -> None:
        with lab:
            # a process nobody stops: teardown kills it
            started.append(subprocess.Popen([*lab.exec_argv("b"), "sleep", "600"]))
            assert set(topology.namespaces) <= set(lab_namespaces())
            raise RuntimeError("the body failed")

    with pytest.raises(RuntimeError, match="the body"):
        body()
    sleeper = started[0]
    sleeper.wait(timeout=10)
    assert not pid_alive(sleeper.pid)
    assert not set(topology.namespaces) & set(lab_namespaces())
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"rdo-{topology.lab_id}-" not in listed
    links_after = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert links_after == links_before
    assert not lab.state_file.exists()


@needs_root
def test_a_killed_lab_is_swept(lab_dir: Path) -> None:
    lab_id = secrets.token_hex(3)
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from rideout.lab.netns import Lab
        from rideout.lab.topology import plan_topology
        Lab(plan_topology({lab_id!r}, {GROUPS!r}), Path({str(lab_dir)!r})).create()
        os.kill(os.getpid(), signal.SIGKILL)  # no clean-up at all
    """)
    subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    left = [ns for ns in lab_namespaces() if ns.startswith(f"rdo-{lab_id}-")]
    assert len(left) == 4
    # the record names them: `down` from another process removes exactly those
    Lab.load(lab_dir, lab_id).destroy()
    assert not [ns for ns in lab_namespaces() if ns.startswith(f"rdo-{lab_id}-")]
    assert sweep(lab_id) == []


@needs_root
def test_sigterm_inside_the_with_tears_the_lab_down(lab_dir: Path) -> None:
    lab_id = secrets.token_hex(3)
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from rideout.lab.netns import Lab
        from rideout.lab.topology import plan_topology
        with Lab(plan_topology({lab_id!r}, {GROUPS!r}), Path({str(lab_dir)!r})):
            print("up", flush=True)
            time.sleep(60)
    """)
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "up"
        assert len([ns for ns in lab_namespaces() if ns.startswith(f"rdo-{lab_id}-")]) == 4
        proc.terminate()
        assert proc.wait(timeout=30) == 143
    assert not [ns for ns in lab_namespaces() if ns.startswith(f"rdo-{lab_id}-")]
    assert not (lab_dir / f"{lab_id}.json").exists()
