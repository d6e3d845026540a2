"""`rideout room ...` through typer's CliRunner against real app servers (both regions,
real Redis) serving the room's private API; the CLI runs in a thread of its own, as it
would in a shell, while the servers run in the test's event loop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from rideout import routes
from rideout.auth.room_tokens import RING_FILENAME, RoomKeyRing
from rideout.cli import app
from rideout.config import Config, dump_toml
from rideout.waitingroom.extension import WaitingRoom
from tests.realtime.conftest import Deployment, running_deployment

runner = CliRunner()


async def rideout(config_file: Path, *args: str) -> Result:
    return await asyncio.to_thread(runner.invoke, app, ["room", *args, "-c", str(config_file)])


def config_file_of(config: Config, tmp_path: Path) -> Path:
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(config))
    return path


async def served(deployment: Deployment, config_file: Path, event_id: str) -> str:
    """A visitor's request id that took its token: queued over HTTP, admitted with
    `rideout room increment`."""
    base = deployment.urls["a1"].replace("ws:", "http:")
    async with httpx.AsyncClient(base_url=base) as http:
        assigned = await http.post(routes.ROOM_ASSIGN_QUEUE_NUM, json={"event_id": event_id})
        request_id = str(assigned.json()["api_request_id"])
        assert (await rideout(config_file, "increment", event_id)).exit_code == 0
        body = {"event_id": event_id, "request_id": request_id}
        taken = await http.post(routes.ROOM_GENERATE_TOKEN, json=body)
        assert taken.status_code == 200, taken.text
    return request_id


@pytest.fixture
async def room(
    make_config: Callable[..., Config], tmp_path: Path
) -> AsyncIterator[tuple[Deployment, Path]]:
    config = make_config(waitingroom={"inlet": "none"})

    def with_room() -> dict[str, Any]:
        return {"extensions": [WaitingRoom(config)]}

    async with running_deployment(config, with_room) as deployment:
        yield deployment, config_file_of(config, tmp_path)


async def test_create_list_show_open_close_increment(room: tuple[Deployment, Path]) -> None:
    deployment, config_file = room
    created = await rideout(config_file, "create", "launch", "--validity", "600", "--json")
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout)["validity"] == 600
    table = await rideout(config_file, "create", "sale", "--closed")
    assert table.exit_code == 0, table.output
    assert "created sale" in table.stdout
    assert "open" in table.stdout

    listed = await rideout(config_file, "list", "--json")
    assert {"launch", "sale"} <= {event["event_id"] for event in json.loads(listed.stdout)}
    assert "launch" in (await rideout(config_file, "list")).stdout

    bumped = await rideout(config_file, "increment", "launch", "--by", "3", "--json")
    assert json.loads(bumped.stdout) == {"serving_num": 3}
    shown = await rideout(config_file, "show", "launch", "--json")
    assert json.loads(shown.stdout)["counters"]["serving"] == 3
    assert "counters" in (await rideout(config_file, "show", "launch")).stdout

    base = deployment.urls["b1"].replace("ws:", "http:")  # the other region serves it too
    async with httpx.AsyncClient(base_url=base) as http:
        body = {"event_id": "sale"}
        assert (await http.post(routes.ROOM_ASSIGN_QUEUE_NUM, json=body)).status_code == 403
        opened = await rideout(config_file, "open", "sale")
        assert "sale: open to arrivals" in opened.stdout
        assigned = await http.post(
            deployment.urls["a1"].replace("ws:", "http:") + routes.ROOM_ASSIGN_QUEUE_NUM,
            json=body,
        )
        assert assigned.status_code == 200, assigned.text
    closed = await rideout(config_file, "close", "sale", "--json")
    assert json.loads(closed.stdout)["open"] is False


async def test_the_rooms_refusals_exit_1_with_its_message(room: tuple[Deployment, Path]) -> None:
    _, config_file = room
    unknown = await rideout(config_file, "show", "no-such-event")
    assert unknown.exit_code == 1
    assert "no-such-event" in unknown.stderr
    assert "HTTP 4" in unknown.stderr
    assert (await rideout(config_file, "create", "twice")).exit_code == 0
    again = await rideout(config_file, "create", "twice")
    assert again.exit_code == 1
    assert "HTTP 409" in again.stderr
    bad = await rideout(config_file, "create", "bad", "--validity", "-1")
    assert bad.exit_code == 1
    assert "validity" in bad.stderr
    usage = await rideout(config_file, "create", "x", "--settings", "[1]")
    assert usage.exit_code == 2


async def test_a_foreign_admin_token_exits_4(room: tuple[Deployment, Path]) -> None:
    deployment, config_file = room
    token_file = deployment.config.keys_dir / "admin-token"
    token_file.write_text("x" * 43)  # not the token the servers hold
    result = await rideout(config_file, "list")
    assert result.exit_code == 4
    assert "admin token was refused (401)" in result.stderr


async def test_events_prints_the_events_stream(room: tuple[Deployment, Path]) -> None:
    deployment, config_file = room
    assert (await rideout(config_file, "create", "stream")).exit_code == 0
    request_id = await served(deployment, config_file, "stream")
    result = await rideout(config_file, "events", "stream", "--json")
    assert result.exit_code == 0, result.output
    entries = [json.loads(line) for line in result.stdout.splitlines()]
    tokens = [entry for entry in entries if entry["type"] == "token_generated"]
    assert [entry["detail"]["request_id"] for entry in tokens] == [request_id]
    text = await rideout(config_file, "events", "stream")
    assert "token_generated" in text.stdout
    assert (await rideout(config_file, "events", "no-such-event")).exit_code == 1


async def test_events_follow_prints_entries_as_they_come(room: tuple[Deployment, Path]) -> None:
    deployment, config_file = room
    assert (await rideout(config_file, "create", "live")).exit_code == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    follower = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rideout", "room", "events", "live", "--follow", "--json",
        "-c", str(config_file),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert follower.stderr is not None
        async with asyncio.timeout(30):  # it prints this once it is following
            while b"following live's events" not in await follower.stderr.readline():
                pass
        request_id = await served(deployment, config_file, "live")
        assert follower.stdout is not None
        async with asyncio.timeout(20):
            while True:
                entry = json.loads(await follower.stdout.readline())
                if entry["type"] == "token_generated":
                    break
        assert entry["detail"]["request_id"] == request_id
    finally:
        follower.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(follower.wait(), 10)
        except TimeoutError:
            follower.kill()
            await follower.wait()
    assert follower.stderr is not None
    assert follower.returncode == 0, (await follower.stderr.read()).decode()[-3000:]


async def test_without_a_running_deployment_exit_3(
    make_config: Callable[..., Config], tmp_path: Path
) -> None:
    config_file = config_file_of(make_config(), tmp_path)
    no_token = await rideout(config_file, "list")
    assert no_token.exit_code == 3
    assert "is rideout up" in no_token.stderr
    from rideout.auth.admin import load_or_create_admin_token

    load_or_create_admin_token(tmp_path / ".rideout" / "keys")
    nobody = await rideout(config_file, "increment", "ev")
    assert nobody.exit_code == 3
    assert "the deployment is not running" in nobody.stderr


def test_rotate_key_keeps_the_previous_key(
    make_config: Callable[..., Config], tmp_path: Path
) -> None:
    config_file = config_file_of(make_config(), tmp_path)
    keys_dir = tmp_path / ".rideout" / "keys"
    first = runner.invoke(app, ["room", "rotate-key", "--json", "-c", str(config_file)])
    assert first.exit_code == 0, first.output
    one = json.loads(first.stdout)
    second = runner.invoke(
        app, ["room", "rotate-key", "--algorithm", "RS256", "--json", "-c", str(config_file)]
    )
    two = json.loads(second.stdout)
    assert (two["previous_kid"], two["algorithm"]) == (one["kid"], "RS256")
    ring = RoomKeyRing.load(keys_dir)
    assert [key.kid for key in ring.keys] == [two["kid"], one["kid"]]
    text = runner.invoke(app, ["room", "rotate-key", "-c", str(config_file)])
    assert "new room key" in text.stdout
    bad = runner.invoke(app, ["room", "rotate-key", "--algorithm", "HS256", "-c", str(config_file)])
    assert bad.exit_code == 2
    (keys_dir / RING_FILENAME).write_bytes(b"garbage")
    broken = runner.invoke(app, ["room", "rotate-key", "-c", str(config_file)])
    assert broken.exit_code == 1
    assert "cannot rotate" in broken.stderr
    assert (keys_dir / RING_FILENAME).read_bytes() == b"garbage"
