"""A transparent WAN link, for real (root): one group's TCP to a host's port crosses a
relay in the router on the host's own address; the host's own group still reaches it
directly, and a partition still cuts what is relayed."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from rideout.lab.netns import Lab, start_in
from rideout.lab.relay import Link
from tests.conftest import until
from tests.lab.test_netns import ECHO_SERVER, connect


async def test_a_transparent_link_carries_only_the_intercepted_group(
    lab: Lab, tmp_path: Path
) -> None:
    topo = lab.topology
    c = topo.host("c").address
    server = await start_in(
        lab, "c", "echo", [sys.executable, "-c", ECHO_SERVER.format(addr=c)],
        log_file=tmp_path / "echo.log",
    )  # fmt: skip
    lab.intercept("east", "c", 7000)
    link = Link("wan", (c, 7000), (c, 7000), netns=topo.router_netns,
                upstream_netns=topo.router_netns, transparent=True)  # fmt: skip
    try:
        await link.start()
        await until(lambda: "listening" in "".join(server.tail()), 10, message="echo server")
        # a (east) dials c's own address; the server sees the relay's, the router's
        assert await asyncio.to_thread(connect, lab, "a", "c") == "ping from 127.100.0.1"
        assert link.connections_total == 1
        link.set_toxics("both", latency=0.3)
        started = time.monotonic()
        assert await asyncio.to_thread(connect, lab, "b", "c") == "ping from 127.100.0.1"
        assert time.monotonic() - started >= 0.6  # a round trip through the link
        lab.partition("east", "west")  # cut before the interception: silence
        answer = await asyncio.to_thread(connect, lab, "a", "c", 1.0)
        assert answer.startswith("TimeoutError"), answer
        assert link.connections_total == 2
    finally:
        await link.stop()
        await server.stop()
