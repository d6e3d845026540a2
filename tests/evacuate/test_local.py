"""The local provider and the engine against a real control plane over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from rideout.config import Config
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
