"""Follow the region's revocation list: refuse revoked tokens and close their connections.

Each app server polls its own region's Redis every ``auth.revocation_interval`` seconds
(one ``GET`` of the list's version; the whole list only when that changed), keeps the
list in memory for the handshake to check without a round trip, and after every change
closes the connections whose token is now refused, with 1008. A revocation recorded in
the writer region reaches the other region's servers through Redis replication, so it
holds after a failover.

When Redis cannot be read the last list read stays in force (and the failure is logged
and counted): a revocation made meanwhile applies once Redis answers again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rideout._tasks import TaskSupervisor
from rideout.auth.revocation import Revocation, RevocationList
from rideout.realtime.polling import Polling
from rideout.store.auction import StoreError
from rideout.store.revocations import RevocationStore

__all__ = ["RevocationFollower"]

log = logging.getLogger("rideout.realtime.revocation")


class RevocationFollower:
    """Keeps `revocations` equal to the list in `store`; calls `on_change` after each change."""

    def __init__(
        self,
        store: RevocationStore,
        revocations: RevocationList,
        interval: float,
        on_change: Callable[[], object],
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self.revocations = revocations
        self._on_change = on_change
        self._on_failure = on_failure
        self._version: str | None = None
        self._loaded = False
        self._failing = False
        self._polling = Polling(self.refresh, interval, "revocations")

    async def refresh(self) -> bool:
        """Read the list if it changed; whether it did. Never raises for the store."""
        try:
            if self._loaded and await self._store.version() == self._version:
                self._recovered()
                return False
            records = await self._store.load()
        except StoreError as exc:
            if self._on_failure is not None:
                self._on_failure()
            if not self._failing:
                self._failing = True
                log.warning("cannot read the revocation list (keeping the last one): %s", exc)
            return False
        self._recovered()
        entries: list[Revocation] = []
        for field, text in records.entries.items():
            try:
                entries.append(Revocation.parse(field, text))
            except ValueError as exc:
                log.error("ignoring an unreadable revocation %r: %s", field[:80], exc)
        self.revocations.replace(entries)
        self._version, self._loaded = records.version, True
        self._on_change()
        return True

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            log.info("the revocation list can be read again")

    def start(self, tasks: TaskSupervisor | None = None) -> None:
        self._polling.start(tasks)

    async def stop(self) -> None:
        await self._polling.stop()
