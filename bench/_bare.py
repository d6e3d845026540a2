"""The baseline: a bare ``websockets`` server speaking just enough of rideout's protocol.

``python -m bench._bare --host H --port P`` serves (websockets 17's asyncio server,
compression off, uvloop like rideout's servers, no other tuning):

- ``{"action":"heartbeat"}`` → the bare text ``pong`` (the JSON is parsed, as rideout does);
- ``{"action":"getState","room":R}`` → a ``state`` message; the connection joins R's
  subscribers;
- ``{"action":"bid","room":R,"amount":N,"id":I}`` → ``websockets.broadcast()`` of an
  ``update`` shaped like rideout's (same keys, similar size) to R's subscribers, then an
  ``ack`` to the bidder. No auth, no Redis, no per-connection queue: the floor rideout's
  fan-out is compared with.

It prints ``ready`` once it listens.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from websockets.asyncio.server import ServerConnection, broadcast, serve

_dumps = json.JSONEncoder(separators=(",", ":")).encode


class Rooms:
    def __init__(self) -> None:
        self.subscribers: dict[str, set[ServerConnection]] = {}
        self.states: dict[str, dict[str, Any]] = {}
        self.seq = 0

    def state(self, room: str) -> dict[str, Any]:
        return self.states.get(room) or {"bid": 0, "bidder": None, "bids": 0, "updated_at": None}

    async def handler(self, ws: ServerConnection) -> None:
        joined: list[str] = []
        try:
            async for raw in ws:
                msg = json.loads(raw)
                action = msg.get("action")
                if action == "heartbeat":
                    await ws.send("pong")
                elif action == "getState":
                    room = msg["room"]
                    self.subscribers.setdefault(room, set()).add(ws)
                    joined.append(room)
                    await ws.send(
                        _dumps(
                            {"type": "state", "region": "bare", "room": room,
                             "state": self.state(room), "user": {},
                             "position": {"epoch": 1, "offset": f"{self.seq}-0"},
                             "recovered": False, "missed": []}
                        )
                    )  # fmt: skip
                elif action == "bid":
                    await self.bid(ws, msg)
        finally:
            for room in joined:
                self.subscribers.get(room, set()).discard(ws)

    async def bid(self, ws: ServerConnection, msg: dict[str, Any]) -> None:
        room, amount = msg["room"], msg["amount"]
        now = int(time.time() * 1000)
        self.seq += 1
        old = self.state(room)
        state = {"bid": amount, "bidder": "bidder", "bids": old["bids"] + 1, "updated_at": now}
        self.states[room] = state
        position = {"epoch": 1, "offset": f"{now}-{self.seq}"}
        update = _dumps(
            {"type": "update", "room": room, "state": state, "position": position,
             "region": "us-east-1"}
        )  # fmt: skip
        broadcast(self.subscribers.get(room, set()), update)
        await ws.send(
            _dumps({"type": "ack", "id": msg.get("id"), "accepted": True, "position": position,
                    "region": "us-east-1"})
        )  # fmt: skip


async def run(host: str, port: int) -> None:
    rooms = Rooms()
    async with serve(
        rooms.handler, host, port, compression=None, max_size=4096, backlog=2048
    ) as server:
        print("ready", flush=True)
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    import uvloop

    uvloop.run(run(args.host, args.port))


if __name__ == "__main__":
    main()
