"""`python -m rideout.processes`: the deployment's processes as `rideout up` starts them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rideout.cluster.supervisor import LocalCluster
from rideout.config import dump_toml, parse_config
from rideout.processes import PROCESSES, _parser
from tests.conftest import config_data


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rideout.processes", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(parse_config(config_data(tmp_path / ".rideout"))))
    return path


def test_help_names_every_process(tmp_path: Path) -> None:
    result = run("--help", cwd=tmp_path)
    assert result.returncode == 0
    for name in PROCESSES:
        assert name in result.stdout
    assert "rideout serve --help" in " ".join(result.stdout.split())  # where to look instead


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["dns", "--config", "missing.toml"], "no such config file"),
        (["serve", "--config", "rideout.toml", "--region", "nowhere", "--zone", "x"],
         "no region 'nowhere'"),
        (["serve", "--config", "rideout.toml", "--region", "us-east-1", "--zone", "x"],
         "'x'"),
        (["canary", "--config", "rideout.toml", "--region", "nowhere"], "nowhere"),
    ],
)  # fmt: skip
def test_what_cannot_start_says_why_in_one_line_and_exits_2(
    config_file: Path, args: list[str], message: str
) -> None:
    result = run(*args, cwd=config_file.parent)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_usage_error_is_argparse_s(tmp_path: Path) -> None:
    result = run("serve", "--config", "x.toml", cwd=tmp_path)  # no --region, --zone
    assert result.returncode == 2
    assert "the following arguments are required: --region, --zone" in result.stderr


def test_every_process_rideout_up_plans_is_one_this_entry_point_takes(config_file: Path) -> None:
    config = parse_config(config_data(config_file.parent / ".rideout"))
    cluster = LocalCluster(config)
    cluster._plan_servers()
    planned = [server.argv for server in cluster._servers.values()]
    assert len(planned) == 2 + 4 + 2  # control plane, name server, four zones, two canaries
    seen = set()
    for argv in planned:
        assert argv[:3] == [sys.executable, "-m", "rideout.processes"]
        args = _parser().parse_args(argv[3:])  # SystemExit (fails the test) if not
        seen.add(args.process)
    assert seen == set(PROCESSES)


UNTIL_TERMINATED = r"""
import asyncio
import signal
from rideout.processes import _until_terminated

async def fails():
    raise OSError("boom")

async def main():
    try:
        await _until_terminated(fails())
    except OSError as exc:
        print("raised", exc)
    ended = []

    async def long_work():
        try:
            await asyncio.sleep(10)
        finally:
            ended.append("work")

    waiting = asyncio.create_task(_until_terminated(long_work()))
    await asyncio.sleep(0.05)
    waiting.cancel()  # the caller asked to stop: not swallowed, and the work stops too
    print("cancelled", (await asyncio.gather(waiting, return_exceptions=True))[0].__class__.__name__)
    print("work ended", ended)
    await _until_terminated(asyncio.sleep(0))
    print("returned")
    loop = asyncio.get_running_loop()
    print("handlers left", [loop.remove_signal_handler(s) for s in (signal.SIGTERM, signal.SIGINT)])

asyncio.run(main())
"""


def test_until_terminated_passes_on_failures_and_cancellations(tmp_path: Path) -> None:
    result = subprocess.run(  # signal handlers of its own: not in the test's process
        [sys.executable, "-c", UNTIL_TERMINATED], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.stdout.split("\n")[:5] == [
        "raised boom", "cancelled CancelledError", "work ended ['work']", "returned",
        "handlers left [False, False]",
    ], result.stdout + result.stderr  # fmt: skip
