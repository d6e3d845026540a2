"""The local provider: rideout's own deployment, through its control plane.

Zone ids are the configuration's zone names (``use1-az1`` ...). Each region is one
resource of kind ``local`` whose "subnets" are its zones that serve: removing a zone
evacuates it (the control plane stops answering its address in the region's DNS answer
and drains its app servers with 1012, so their clients move to the region's other zone),
merging it back recovers it. The control plane refuses to evacuate a region's last
serving zone whoever asks; the engine's plan refuses it first ("would leave no subnet").

The provider reaches the control plane through a :class:`ZoneSwitch`: over HTTP with the
admin token (:class:`HttpZoneSwitch`, what ``rideout evacuate`` uses), or in-process (the
control plane's own autoshift).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from rideout import _http, routes
from rideout.auth.admin import load_or_create_admin_token
from rideout.auth.errors import CredentialError
from rideout.config import Config
from rideout.evacuate.errors import ProviderError
from rideout.evacuate.model import Placement, Subnets, require_unchanged

__all__ = ["KIND", "HttpZoneSwitch", "LocalProvider", "ZoneInfo", "ZoneSwitch", "local_provider"]

KIND = "local"


@dataclass(frozen=True, slots=True)
class ZoneInfo:
    zone: str
    region: str
    evacuated: bool


class ZoneSwitch(Protocol):
    """Reads and changes which zones the control plane has evacuated."""

    def zones(self) -> list[ZoneInfo]: ...

    def set_evacuated(self, zone: str, evacuated: bool) -> None:
        """Evacuate or recover ``zone``; ProviderError if the control plane refuses."""
        ...


class HttpZoneSwitch:
    """The control plane's ``/v1/zones`` API with the admin token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        operator: str,
        reason: str = "manual",
        expires_in: float | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.base_url = base_url
        self._auth = {"Authorization": f"Bearer {token}"}
        self.operator = operator
        self.reason = reason
        self.expires_in = expires_in
        self._timeout = timeout

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            with _http.sync_client(base_url=self.base_url, timeout=self._timeout) as http:
                answer = http.request(method, path, json=body, headers=self._auth)
        except httpx.HTTPError as exc:
            raise ProviderError(
                f"the control plane at {self.base_url} does not answer ({exc or type(exc).__name__}):"
                " is `rideout up` running?"
            ) from exc
        try:
            data = answer.json()
        except ValueError:
            data = {}
        if answer.status_code != 200:
            message = data.get("message") or data.get("error") or answer.reason_phrase
            raise ProviderError(f"the control plane refused {method} {path}: {message}")
        return data

    def zones(self) -> list[ZoneInfo]:
        data = self._call("GET", routes.ZONES)
        try:
            return [ZoneInfo(z["zone"], z["region"], bool(z["evacuated"])) for z in data["zones"]]
        except (KeyError, TypeError) as exc:
            raise ProviderError(f"the control plane's {routes.ZONES} is not as expected") from exc

    def set_evacuated(self, zone: str, evacuated: bool) -> None:
        if evacuated:
            body: dict[str, Any] = {"operator": self.operator, "reason": self.reason}
            if self.expires_in is not None:
                body["expires_in"] = self.expires_in
            self._call("POST", routes.ZONE_EVACUATE.format(zone_id=zone), body)
        else:
            self._call("POST", routes.ZONE_RECOVER.format(zone_id=zone))


class LocalProvider:
    """A :class:`~rideout.evacuate.model.Provider` of rideout's own zones."""

    name = "local"

    def __init__(self, switch: ZoneSwitch) -> None:
        self.switch = switch

    def kinds(self) -> tuple[str, ...]:
        return (KIND,)

    def zone_ids(self) -> frozenset[str]:
        return frozenset(z.zone for z in self.switch.zones())

    def _check(self, kind: str) -> None:
        if kind != KIND:
            raise ProviderError(f"the local provider has resources of kind {KIND!r} only")

    def subnets_in_zone(self, zone_id: str) -> frozenset[str]:
        return frozenset(z.zone for z in self.switch.zones() if z.zone == zone_id)

    def zones_of(self, subnets: Iterable[str]) -> dict[str, str]:
        known = {z.zone for z in self.switch.zones()}
        return {s: s for s in subnets if s in known}

    def placements(self, kind: str) -> list[Placement]:
        self._check(kind)
        zones = self.switch.zones()
        regions = list(dict.fromkeys(z.region for z in zones))
        return [
            Placement(
                KIND, region, tuple(z.zone for z in zones if z.region == region and not z.evacuated)
            )
            for region in regions
        ]

    def describe(self, kind: str, resource: str) -> Placement | None:
        return next((p for p in self.placements(kind) if p.resource == resource), None)

    def update(
        self, kind: str, resource: str, subnets: Subnets, *, expected: Subnets | None = None
    ) -> Placement | None:
        """Make exactly ``subnets`` of region ``resource`` serve, if ``expected`` serve
        when read right before: recover those that are evacuated first, then evacuate
        the rest (the region never has none); the region as read after."""
        self._check(kind)
        zones = [z for z in self.switch.zones() if z.region == resource]
        if not zones:
            raise ProviderError(f"no region {resource!r} in this deployment")
        unknown = set(subnets) - {z.zone for z in zones}
        if unknown:
            raise ProviderError(f"{', '.join(sorted(unknown))} not zone(s) of {resource}")
        serving = tuple(z.zone for z in zones if not z.evacuated)
        require_unchanged(KIND, resource, serving, expected)
        for z in zones:
            if z.evacuated and z.zone in subnets:
                self.switch.set_evacuated(z.zone, False)
        for z in zones:
            if not z.evacuated and z.zone not in subnets:
                self.switch.set_evacuated(z.zone, True)
        return self.describe(kind, resource)


def local_provider(
    config: Config,
    *,
    operator: str,
    reason: str = "manual",
    expires_in: float | None = None,
) -> LocalProvider:
    """The provider of the deployment ``config`` describes, over its control plane's API."""
    try:
        token = load_or_create_admin_token(config.keys_dir)
    except CredentialError as exc:
        raise ProviderError(f"cannot read the admin token: {exc}") from exc
    switch = HttpZoneSwitch(
        routes.control_plane_url(config), token, operator=operator, reason=reason,
        expires_in=expires_in,
    )  # fmt: skip
    return LocalProvider(switch)
