"""The WAN link: bytes through unchanged, toxics per direction changed on a live
connection, the control socket; and (root) a relay in the router across a real lab.

Timing is asserted one way only (at least what was configured), with generous upper
bounds: the machine is shared."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rideout.errors import InvalidArgument
from rideout.lab.errors import LabError
from rideout.lab.netns import Lab, start_in
from rideout.lab.relay import Link, Toxics, delivery_time, send_control, serve_control
from tests.conftest import FakeClock, free_port, until

HOST = "127.0.0.1"


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[tuple[str, int]]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, HOST, 0)
    try:
        yield HOST, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def relayed(**kwargs: object) -> AsyncIterator[Link]:
    async with echo_server() as upstream:
        link = Link("wan", (HOST, free_port(HOST)), upstream, **kwargs)  # type: ignore[arg-type]
        async with link:
            yield link


async def round_trip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes = b"x"
) -> float:
    started = time.monotonic()
    writer.write(data)
    await writer.drain()
    assert await reader.readexactly(len(data)) == data
    return time.monotonic() - started


# --------------------------------------------------------------------------- pure


def test_delivery_keeps_order_under_jitter() -> None:
    toxics = Toxics(latency=0.1, jitter=0.05)
    assert delivery_time(10.0, 0.0, toxics, 0.0) == pytest.approx(10.1)
    assert delivery_time(10.0, 0.0, toxics, 0.5) == pytest.approx(10.125)
    # a chunk read later, with less jitter, still waits for the one before it
    assert delivery_time(10.01, 10.15, toxics, 0.0) == pytest.approx(10.15)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("latency", -1, "latency"),
        ("loss", 1.5, "probability"),
        ("loss_mode", "drop", "loss_mode"),
        ("bandwidth", -1, "bandwidth"),
        ("stopped", 1, "stopped"),
    ],
)
def test_bad_toxics_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Toxics(**{field: value})  # type: ignore[arg-type]


def test_set_toxics_checks_its_arguments() -> None:
    link = Link("wan", (HOST, 1), (HOST, 2))
    with pytest.raises(InvalidArgument, match="no toxic colour"):
        link.set_toxics(colour=1)
    with pytest.raises(InvalidArgument, match="direction"):
        link.set_toxics("sideways", latency=1)
    with pytest.raises(InvalidArgument, match="latency"):
        link.set_toxics(latency=-1)
    assert link.toxics == {"up": Toxics(), "down": Toxics()}  # nothing half-applied
    assert link.set_toxics("down", latency=0.5)["down"].latency == 0.5
    assert link.toxics["up"] == Toxics()


# --------------------------------------------------------------------------- real sockets


async def test_bytes_cross_unchanged_both_ways() -> None:
    payload = os.urandom(3 * 1024 * 1024)
    async with relayed() as link:
        reader, writer = await asyncio.open_connection(*link.address)
        writer.write(payload)
        await writer.drain()
        assert await reader.readexactly(len(payload)) == payload
        writer.write_eof()  # a half-close crosses too: the echo closes back
        assert await reader.read() == b""
        writer.close()
    assert link.connections_total == 1


async def test_latency_is_added_each_way_and_changed_on_a_live_connection() -> None:
    async with relayed() as link:
        reader, writer = await asyncio.open_connection(*link.address)
        baseline = await round_trip(reader, writer)
        link.set_toxics("both", latency=0.05)
        delayed = [await round_trip(reader, writer) for _ in range(3)]
        assert all(0.1 <= rtt < 2.0 for rtt in delayed), delayed
        link.set_toxics("down", latency=0.0)
        one_way = await round_trip(reader, writer)
        assert 0.05 <= one_way < 2.0
        link.reset_toxics()
        assert await round_trip(reader, writer) < 2.0
        writer.close()
    assert baseline < 2.0
    assert link.connections_total == 1  # one connection throughout


async def test_the_clock_and_sleep_are_injected() -> None:
    clock = FakeClock()
    async with relayed(clock=clock, sleep=clock.asleep, rng=lambda: 0.5) as link:
        link.set_toxics("up", latency=30.0, jitter=2.0)
        reader, writer = await asyncio.open_connection(*link.address)
        assert await round_trip(reader, writer) < 10  # 31 s of fake time, slept at once
        writer.close()
    assert clock.sleeps == [pytest.approx(31.0)]


async def test_stop_holds_every_byte_until_resumed() -> None:
    async with relayed() as link:
        reader, writer = await asyncio.open_connection(*link.address)
        link.set_toxics("up", stopped=True)
        sent = b"".join(f"{n:06d}".encode() for n in range(50_000))  # 300 kB, numbered
        writer.write(sent)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 0.5)  # silence
        link.set_toxics("up", stopped=False)
        assert await asyncio.wait_for(reader.readexactly(len(sent)), 30) == sent
        writer.close()


async def test_loss_resets_or_stalls_the_connection() -> None:
    async with relayed(rng=lambda: 0.0) as link:
        link.set_toxics("up", loss=0.5, loss_mode="reset")
        reader, writer = await asyncio.open_connection(*link.address)
        writer.write(b"lost")
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(10), 10)
        writer.close()

        link.set_toxics("up", loss_mode="timeout")
        reader, writer = await asyncio.open_connection(*link.address)
        writer.write(b"lost")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(10), 0.5)  # silence, not a close
        link.reset_toxics()
        writer.write(b"still")  # a lost connection stays lost
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(10), 0.3)
        writer.close()
        reader, writer = await asyncio.open_connection(*link.address)
        assert await round_trip(reader, writer) < 2.0  # a new one is not
        writer.close()


async def test_bandwidth_limits_throughput() -> None:
    async with relayed() as link:
        link.set_toxics("down", bandwidth=400_000)
        reader, writer = await asyncio.open_connection(*link.address)
        took = await round_trip(reader, writer, b"b" * 200_000)
        assert 0.4 <= took < 10, took
        writer.close()


async def test_stop_with_live_connections_ends_them_and_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stopping a link while connections cross it closes them without asyncio logging a
    traceback (it did for every live connection: the connection callback's own task was
    cancelled, which Python 3.11's streams report as an exception in a callback)."""
    caplog.set_level("DEBUG", logger="asyncio")
    async with relayed() as link:
        streams = [await asyncio.open_connection(*link.address) for _ in range(3)]
        for reader, writer in streams:
            await round_trip(reader, writer)
        link.set_toxics("down", latency=5.0)  # a chunk held in flight as it stops
        streams[0][1].write(b"held")
        await streams[0][1].drain()
    for reader, writer in streams:
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    await asyncio.sleep(0)  # a callback scheduled by the stop runs
    assert not [r.getMessage() for r in caplog.records if r.name == "asyncio"]


async def test_an_unreachable_upstream_closes_the_client() -> None:
    link = Link("wan", (HOST, free_port(HOST)), (HOST, free_port(HOST)))
    async with link:
        reader, writer = await asyncio.open_connection(*link.address)
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        with pytest.raises(LabError, match="cannot listen"):  # the address is taken
            await Link("again", link.address, (HOST, 2)).start()


async def test_the_control_socket_is_the_owners_alone(tmp_path: Path) -> None:
    path = tmp_path / "lab" / "links.sock"
    async with relayed() as link:
        server = await serve_control(path, {"wan": link})
        try:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
            shown = await send_control(
                path, {"op": "set", "link": "wan", "direction": "up", "toxics": {"latency": 0.2}}
            )
            assert shown["wan"]["up"]["latency"] == 0.2
            assert shown["wan"]["down"]["latency"] == 0.0
            assert link.toxics["up"].latency == 0.2
            with pytest.raises(LabError, match="KeyError"):
                await send_control(path, {"op": "set", "link": "nope", "toxics": {}})
            with pytest.raises(LabError, match="latency"):
                await send_control(path, {"op": "set", "link": "wan", "toxics": {"latency": -1}})
            assert (await send_control(path, {"op": "show"}))["wan"]["up"]["latency"] == 0.2
        finally:
            server.close()
            await server.wait_closed()
    with pytest.raises(LabError, match="cannot reach"):
        await send_control(tmp_path / "nothing.sock", {"op": "show"})


# --------------------------------------------------------------------------- in a lab

ECHO = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(({addr!r}, 7000)); s.listen(); print("listening", flush=True)
while True:
    c, _ = s.accept()
    while data := c.recv(65536):
        c.sendall(data)
    c.close()
"""


async def test_a_relay_in_the_router_carries_and_partitions_cut_it(
    lab: Lab, tmp_path: Path
) -> None:
    topo = lab.topology
    server = await start_in(
        lab, "c", "echo", [sys.executable, "-c", ECHO.format(addr=topo.host("c").address)],
        log_file=tmp_path / "echo.log",
    )  # fmt: skip
    relay_address = lab.add_relay_address("west")
    assert relay_address == topo.relay_address("west", 0) == "127.100.2.200"
    link = Link(
        "wan",
        (relay_address, 7000),
        (topo.host("c").address, 7000),
        netns=topo.router_netns,
        upstream_netns=topo.router_netns,
    )
    try:
        await until(lambda: "listening" in "".join(server.tail()), 10, message="echo server")
        async with link:
            link.set_toxics("both", latency=0.03)
            client = f"""
import socket, time
c = socket.create_connection(({relay_address!r}, 7000), timeout=3)
rtts = []
for _ in range(3):
    t = time.monotonic(); c.sendall(b"x"); assert c.recv(1) == b"x"
    rtts.append(time.monotonic() - t)
print(min(rtts))
"""
            cmd = [*lab.exec_argv("a"), sys.executable, "-c", client]
            proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0
            assert 0.06 <= float(out) < 2.0

            lab.partition("east", "west")  # the relay's address is in west's prefix
            proc = await asyncio.create_subprocess_exec(
                *lab.exec_argv("a"), sys.executable, "-c",
                f"import socket; socket.create_connection(({relay_address!r}, 7000), timeout=1)",
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            _, err = await asyncio.wait_for(proc.communicate(), 30)
            assert b"TimeoutError" in err
    finally:
        await server.stop()
