"""The local provider and the engine against a real control plane over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rideout.cli import app
from rideout.config import Config, dump_toml
from rideout.controlplane.app import create_app
from rideout.evacuate.engine import EXIT_OK, EXIT_REFUSED, Engine, Options
from rideout.evacuate.errors import ProviderError
from rideout.evacuate.ledger import SqliteLedger
from rideout.evacuate.local import KIND, local_provider
from tests.conftest import serving


async def test_evacuate_and_recover_a_zone_through_the_control_plane(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    cp = config.control_plane
    app = create_app(config)
    ledger = SqliteLedger.in_data_dir(config.data_dir)
    provider = local_provider(config, operator="alice")
    engine = Engine(provider, ledger)
    async with serving(app, cp.address, cp.port):
        plane = app.state.api.plane
        # The provider is synchronous (as the engine is): off the loop the server runs on.
        assert provider.kinds() == (KIND,)
        assert await asyncio.to_thread(provider.subnets_in_zone, "use1-az1") == {"use1-az1"}
        assert await asyncio.to_thread(provider.subnets_in_zone, "us-east-1a") == frozenset()
        plan = await asyncio.to_thread(engine.plan_evacuation, "use1-az1")
        assert [(s.resource, s.after) for s in plan.actions] == [("us-east-1", ("use1-az2",))]

        outcome = await asyncio.to_thread(engine.evacuate, "use1-az1", Options(operator="alice"))
        assert outcome.exit_code == EXIT_OK, outcome
        assert plane.zones.evacuated == {"use1-az1"}
        assert plane.zones.evacuations["use1-az1"].operator == "alice"
        assert plane.resolve(config.app_domain, "A").answers[0][3] == "127.0.1.2"
        (row,) = ledger.records()
        assert (row.zone_id, row.resource, row.kind, row.removed) == (
            "use1-az1", "us-east-1", KIND, ("use1-az1",),
        )  # fmt: skip

        # The region's last zone: the engine refuses before asking, the control plane too.
        last = await asyncio.to_thread(engine.evacuate, "use1-az2")
        assert last.exit_code == EXIT_REFUSED
        with pytest.raises(ProviderError, match="last zone"):
            await asyncio.to_thread(provider.switch.set_evacuated, "use1-az2", True)

        back = await asyncio.to_thread(engine.recover, "use1-az1")
        assert back.exit_code == EXIT_OK
        assert plane.zones.evacuated == frozenset()
        assert ledger.records() == []
    # The control plane gone: a clear provider error, nothing recorded.
    with pytest.raises(ProviderError, match="does not answer"):
        provider.placements(KIND)


async def test_the_cli_tables_and_summaries(
    make_config: Callable[..., Config], tmp_path: Path
) -> None:
    """`rideout evacuate` / `recover` as an operator reads them (the end-to-end test
    checks the JSON): plan table, progress, summary, refusal, exit codes."""
    config = make_config()
    path = tmp_path / "rideout.toml"
    path.write_text(dump_toml(config))
    cp = config.control_plane
    runner = CliRunner()

    async def run(*args: str) -> tuple[int, str]:
        result = await asyncio.to_thread(
            runner.invoke, app, [*args, "-c", str(path)], env={"COLUMNS": "200"}
        )
        return result.exit_code, result.output

    async with serving(create_app(config), cp.address, cp.port):
        code, out = await run("evacuate", "--zone-id", "use1-az1", "--dry-run")
        assert code == 0
        assert "dry run: nothing changed" in out
        assert "us-east-1" in out
        assert "use1-az1, use1-az2" in out  # now
        code, out = await run("evacuate", "--zone-id", "use1-az1", "--operator", "carol")
        assert code == 0
        assert "evacuate use1-az1: 1 changed, 0 skipped, 0 failed" in out
        assert "removing use1-az1" in out
        code, out = await run("evacuate", "--zone-id", "use1-az2")
        assert code == 2
        assert "refused" in out
        assert "would leave no subnet" in out
        code, out = await run("evacuate", "list")
        assert "carol" in out
        code, out = await run("recover", "--dry-run")
        assert code == 0
        assert "merge back" in out
        code, out = await run("recover")
        assert code == 0
        assert "recover every zone in the ledger: 1 changed" in out
        assert SqliteLedger.in_data_dir(config.data_dir).records() == []
