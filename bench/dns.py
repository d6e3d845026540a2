"""DNS under a herd: `rideout dns` against NSD serving the same records, in one run.

::

    .venv/bin/python -m bench.dns            # 3 rounds of 5 s each per server, ~1 minute
    .venv/bin/python -m bench.dns --quick    # 1 round of 2 s

Both servers run on loopback ports of this machine, one after the other in alternating
rounds (the order flips every round): `rideout dns` as `rideout up` starts it (the real
CLI, answering from a published view), and NSD (Debian's ``nsd``, one server process,
run in the foreground as ``nobody`` when the benchmark is root) from a zone file holding
exactly the records rideout answers for the same view, tuned as rideout is: response
rate limiting off (it would drop a herd from one address on purpose), minimal responses
(no NS and glue added to every answer, as rideout adds none); its socket buffers are
its own (Debian's NSD 4.6 has no setting for them). The load is the same for both:

1. **Throughput**: ``dnsperf`` (Debian's) for `--seconds` seconds, 4 sockets, at most
   `--outstanding` queries in flight; queries/s completed and queries lost (no answer
   within 2 s). The goal: rideout ≥ 0.3 of NSD with none lost.
2. **Burst**: 5,000 queries sent as fast as 8 sockets can (`bench._dnsload`), ids 0..4999;
   how many were answered, and when the last answer came.

The query mix is the one a herd sends: the app domain's A (half of them in 0x20 case,
half with EDNS), its TXT, and a NODATA (AAAA of a region's name). Without ``nsd`` or
``dnsperf`` the benchmark says so and exits 0 (``apt-get install nsd dnsperf``; ``./dev``
installs them as root).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dns.message

from bench._dnsload import burst
from bench._harness import BENCH_ROOT, Child, free_port, median
from rideout.config import Config, dump_toml, parse_config
from rideout.dns.feed import DnsView, ViewFile
from rideout.dns.records import DnsZoneConfig, Record, resolve

GOAL = 0.3
BURST = 5000
_STAT = re.compile(
    r"^\s*(Queries sent|Queries completed|Queries lost|Queries per second):\s+([\d.]+)"
)


def config_for(work: Path) -> Config:
    data: dict[str, Any] = {
        "data_dir": str(work / ".rideout"),
        "control_plane": {
            "port": free_port("127.0.0.1"),
            "dns_port": free_port("127.0.0.1", udp=True),
            "dns_metrics_port": free_port("127.0.0.1"),
        },
    }
    return parse_config(data)


def questions(app: str) -> list[tuple[str, str, bool]]:
    """The herd's mix: (name, type, EDNS)."""
    mixed = "".join(c.upper() if i % 2 else c for i, c in enumerate(app))
    return [(app, "A", False), (mixed, "A", True), (app, "TXT", False), (f"us-east-1.{app}", "AAAA", False)]  # fmt: skip


def zone_file(zone: DnsZoneConfig, health: dict[str, bool]) -> str:
    """Every record rideout answers for `health`, as a zone file (NSD serves the same)."""
    records: dict[Record, None] = {}
    for name, rtype in zone.questions():
        for record in resolve(zone, name, rtype, health).answers:
            records[record] = None
    soa = next(r for r in records if r.type == "SOA")
    lines = [f"$ORIGIN {zone.app_domain}.", soa.to_zone()]
    lines += [r.to_zone() for r in records if r is not soa]
    return "\n".join(lines) + "\n"


def nsd_config(work: Path, port: int, zone: DnsZoneConfig, user: str | None) -> Path:
    conf = work / "nsd.conf"
    conf.write_text(
        f"""server:
    ip-address: 127.0.0.1@{port}
    port: {port}
    username: "{user or ""}"
    chroot: ""
    zonesdir: "{work}"
    database: ""
    zonelistfile: "{work}/zone.list"
    xfrdfile: "{work}/xfrd.state"
    xfrdir: "{work}"
    pidfile: "{work}/nsd.pid"
    logfile: "{work}/nsd.log"
    server-count: 1
    tcp-count: 16
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
    minimal-responses: yes
    hide-version: yes
    verbosity: 1
remote-control:
    control-enable: no
zone:
    name: {zone.app_domain}
    zonefile: "{work}/zone"
"""
    )
    return conf


async def wait_answering(port: int, app: str, child: Child, timeout: float = 30.0) -> None:
    query = dns.message.make_query(app, "A").to_wire()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.running:
            raise RuntimeError(f"{child.name} exited while starting:\n{child.log_tail()}")
        if burst(port, 1, [query], sockets=1, timeout=0.3).replies:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{child.name} did not answer within {timeout:g} s:\n{child.log_tail()}")


def dnsperf(port: int, queries: Path, seconds: float, outstanding: int) -> dict[str, float]:
    out = subprocess.run(
        ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", queries, "-l", str(seconds),
         "-c", "4", "-T", "1", "-q", str(outstanding), "-t", "2"],
        capture_output=True, text=True, timeout=seconds + 30, check=True,
    ).stdout  # fmt: skip
    stats = {}
    for line in out.splitlines():
        if m := _STAT.match(line):
            stats[m.group(1).split()[-1]] = float(m.group(2))
    return stats  # sent, completed, lost, second (qps)


def prepare(work: Path) -> tuple[Config, dict[str, tuple[list[str], int]], Path]:
    """Both servers' files in `work`: their commands and ports, and dnsperf's queries."""
    config = config_for(work)
    zone = DnsZoneConfig.from_config(config)
    health = {r.name: r.role == "primary" for r in config.regions}
    (work / "rideout.toml").write_text(dump_toml(config))
    ViewFile(config.run_dir / "dns-view.json").publish(
        DnsView(config.app_domain, health, 1, time.time())
    )
    nsd_dir = work / "nsd"
    nsd_dir.mkdir()
    (nsd_dir / "zone").write_text(zone_file(zone, health))
    user = None
    if os.geteuid() == 0:  # NSD drops to an unprivileged user of our choosing
        user = "nobody"
        entry = pwd.getpwnam(user)
        work.chmod(0o711)  # it must reach its directory below ours
        os.chown(nsd_dir, entry.pw_uid, entry.pw_gid)
        os.chown(nsd_dir / "zone", entry.pw_uid, entry.pw_gid)
    nsd_port = free_port("127.0.0.1", udp=True)
    conf = nsd_config(nsd_dir, nsd_port, zone, user)
    queries = work / "queries.txt"
    queries.write_text("".join(f"{n} {t}\n" for n, t, _ in questions(config.app_domain)))
    rideout = [sys.executable, "-m", "rideout", "dns", "-c", str(work / "rideout.toml")]
    commands = {
        "rideout": (rideout, config.control_plane.dns_port),
        "nsd": (["nsd", "-d", "-c", str(conf)], nsd_port),
    }
    return config, commands, queries


def burst_templates(app: str) -> list[bytes]:
    return [
        dns.message.make_query(name, rtype, use_edns=0 if edns else False).to_wire()
        for name, rtype, edns in questions(app)
    ]


async def run(args: argparse.Namespace) -> int:
    missing = [tool for tool in ("nsd", "dnsperf") if shutil.which(tool) is None]
    if missing:
        print(f"bench.dns skipped: {' and '.join(missing)} not installed "
              "(Debian: apt-get install nsd dnsperf; ./dev does as root)")  # fmt: skip
        return 0
    with tempfile.TemporaryDirectory(prefix="rideout-bench-dns-") as tmp:
        work = Path(tmp)
        config, commands, queries = prepare(work)
        servers = {
            name: (Child(name, argv, work / f"{name}.log"), port)
            for name, (argv, port) in commands.items()
        }
        results: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
        try:
            for child, server_port in servers.values():
                await child.start()
                await wait_answering(server_port, config.app_domain, child)
            templates = burst_templates(config.app_domain)
            for round_ in range(args.rounds):
                order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
                for name in order:
                    _, server_port = servers[name]
                    stats = await asyncio.to_thread(
                        dnsperf, server_port, queries, args.seconds, args.outstanding
                    )
                    shot = await asyncio.to_thread(burst, server_port, BURST, templates)
                    figures = results[name]
                    figures.setdefault("qps", []).append(stats.get("second", 0.0))
                    figures.setdefault("lost", []).append(stats.get("lost", -1.0))
                    figures.setdefault("burst_answered", []).append(len(shot.replies))
                    figures.setdefault("burst_last_ms", []).append(shot.last_reply_at * 1000)
                    print(f"round {round_ + 1} {name:8} {stats.get('second', 0):9.0f} q/s, "
                          f"lost {stats.get('lost', -1):.0f}; burst {len(shot.replies)}/{BURST} "
                          f"answered, last at {shot.last_reply_at * 1000:.0f} ms", flush=True)  # fmt: skip
        finally:
            for child, _ in servers.values():
                await child.stop()
        report(results, args)
        return 0


def report(results: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> None:
    r, n = results["rideout"], results["nsd"]
    # The servers ran side by side in each round: a round's ratio is the fair comparison
    # on a machine whose load drifts between rounds; the median of those is reported.
    ratio = median([a / b for a, b in zip(r["qps"], n["qps"], strict=True) if b] or [math.nan])
    none_lost = max(r["lost"]) == 0
    full_burst = min(r["burst_answered"]) == BURST
    rows = [
        ("queries/s (dnsperf, median; ratio: median of rounds')", f"{median(r['qps']):,.0f}", f"{median(n['qps']):,.0f}",
         f"{ratio:.2f}", f">= {GOAL}", "PASS" if ratio >= GOAL and none_lost else "MISS"),
        ("queries lost (max over rounds)", f"{max(r['lost']):.0f}", f"{max(n['lost']):.0f}", "", "0",
         "PASS" if none_lost else "MISS"),
        (f"burst of {BURST:,}: answered (min)", f"{min(r['burst_answered']):.0f}",
         f"{min(n['burst_answered']):.0f}", "", f"{BURST}", "PASS" if full_burst else "MISS"),
        ("burst: last answer after (ms, median)", f"{median(r['burst_last_ms']):.0f}",
         f"{median(n['burst_last_ms']):.0f}", "", "", ""),
    ]  # fmt: skip
    header = ("measure", "rideout", "nsd", "ratio", "goal", "")
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)))
    print(f"({args.rounds} rounds of {args.seconds:g} s, {args.outstanding} in flight, "
          f"{os.cpu_count()} cores shared by client and servers)")  # fmt: skip
    out = BENCH_ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"dns-{time.strftime('%Y%m%d-%H%M%S')}.json"
    with contextlib.suppress(OSError):
        path.write_text(json.dumps({"args": vars(args), "results": results}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--outstanding", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="1 round of 2 s")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds = 1, 2.0
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
