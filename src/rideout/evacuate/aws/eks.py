"""EKS clusters: evacuating a zone cordons and taints its nodes through the Kubernetes API.

A cluster is one resource whose placement is the set of zone *ids* with schedulable
nodes. Nodes are found by the well-known ``topology.kubernetes.io/zone`` label (its
value is a zone *name*, mapped to the id through EC2). Evacuating a zone, for each of
its nodes (``GET /api/v1/nodes?labelSelector=topology.kubernetes.io/zone=NAME``,
paginated with ``limit``/``continue``):

- adds the taint ``evacuate.rideout.dev/zone=ZONE_ID:NoExecute`` (evicts the pods that
  do not tolerate it and keeps new ones off) and sets ``spec.unschedulable`` (cordon);
- notes in the annotation ``evacuate.rideout.dev/cordoned`` that rideout cordoned it, so
  recovery uncordons only the nodes rideout cordoned, never one an operator had.

The bearer token is a fixed one (``aws eks get-token``'s, from a file) or, by default,
made as ``aws eks get-token`` makes it: a presigned STS ``GetCallerIdentity`` URL that
names the cluster in its signed ``x-k8s-aws-id`` header, prefixed ``k8s-aws-v1.``
(EKS accepts one for 15 minutes; a new one is made every 10).

Each change is a strategic-merge ``PATCH /api/v1/nodes/NAME`` carrying the node's
``metadata.resourceVersion``: the API server answers 409 if the node changed since it
was read, and the change is recomputed from a fresh read (a few times at most).
``spec.taints`` has no merge key, so the patch sends the node's whole taint list.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from rideout import _validate
from rideout.evacuate.aws._boundary import AwsSettings, calling
from rideout.evacuate.aws.errors import KubernetesError
from rideout.evacuate.aws.zones import ZoneDirectory
from rideout.evacuate.model import Placement, require_unchanged

__all__ = [
    "CORDONED_ANNOTATION",
    "KIND",
    "TAINT_KEY",
    "ZONE_LABEL",
    "EksCluster",
    "EksNodes",
    "KubernetesApi",
    "evacuate_patch",
    "recover_patch",
    "sts_token",
]

KIND = "eks"
ZONE_LABEL = "topology.kubernetes.io/zone"
TAINT_KEY = "evacuate.rideout.dev/zone"
CORDONED_ANNOTATION = "evacuate.rideout.dev/cordoned"
NODES = "/api/v1/nodes"
_PAGE = 500
_CONFLICT_ATTEMPTS = 5
_TOKEN_PREFIX = "k8s-aws-v1."
_CLUSTER_HEADER = "x-k8s-aws-id"
_TOKEN_REFRESH = 600.0  # seconds: EKS accepts a token for 15 minutes


def sts_token(settings: AwsSettings, cluster_name: str) -> str:
    """An EKS bearer token for ``cluster_name``, made as ``aws eks get-token`` makes it."""
    _validate.text("cluster_name", cluster_name)
    sts = settings.client("sts")

    def name_the_cluster(request: Any, **_: Any) -> None:
        request.headers[_CLUSTER_HEADER] = cluster_name

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", name_the_cluster)
    with calling("sts", "presign GetCallerIdentity"):
        url = sts.generate_presigned_url(
            "get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET"
        )
    return _TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class _RefreshingToken:
    """A token made on first use and again once it is ``_TOKEN_REFRESH`` seconds old."""

    def __init__(self, make: Callable[[], str], clock: Callable[[], float]) -> None:
        self._make = make
        self._clock = clock
        self._lock = threading.Lock()
        self._token = ""
        self._made = 0.0

    def __call__(self) -> str:
        with self._lock:
            if not self._token or self._clock() - self._made >= _TOKEN_REFRESH:
                self._token, self._made = self._make(), self._clock()
            return self._token


class _Bearer(httpx.Auth):
    def __init__(self, token: Callable[[], str]) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token()}"
        yield request


@dataclass(frozen=True, slots=True)
class EksCluster:
    """One cluster: ``resource`` is its ledger key (the cluster ARN), ``server`` its API
    endpoint, ``token`` a bearer token or a callable that returns one (called for every
    request: see :func:`sts_token`), ``ca_file`` the cluster's CA bundle (default: the
    system's)."""

    resource: str
    server: str
    token: str | Callable[[], str] = field(repr=False)
    ca_file: str | None = None
    timeout: float = 10.0
    effect: str = "NoExecute"

    def __post_init__(self) -> None:
        _validate.text("resource", self.resource)
        _validate.secure_url("server", self.server)  # the bearer token goes there
        if not callable(self.token):
            _validate.text("token", self.token)
        _validate.seconds("timeout", self.timeout)
        _validate.choice("effect", self.effect, ("NoExecute", "NoSchedule"))

    @property
    def name(self) -> str:
        """The cluster's name: the last part of its ARN (``...:cluster/NAME``)."""
        return self.resource.rsplit("/", 1)[-1]

    @classmethod
    def signed(
        cls,
        settings: AwsSettings,
        resource: str,
        server: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> EksCluster:
        """A cluster whose token is made with ``settings``' AWS credentials
        (:func:`sts_token`), anew every 10 minutes."""
        name = resource.rsplit("/", 1)[-1]
        token = _RefreshingToken(lambda: sts_token(settings, name), clock)
        return cls(resource, server, token, **kwargs)


class KubernetesApi:
    """The few node requests evacuation needs, over httpx, errors mapped to
    :class:`KubernetesError`."""

    def __init__(self, cluster: EksCluster, *, transport: httpx.BaseTransport | None = None):
        self.cluster = cluster
        token = cluster.token
        self._http = httpx.Client(
            base_url=cluster.server,
            auth=_Bearer(token if callable(token) else lambda: token),
            headers={"Accept": "application/json"},
            verify=cluster.ca_file or True,
            timeout=cluster.timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise KubernetesError(
                f"{self.cluster.resource}: {method} {path}: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code >= 400 and response.status_code != 409:
            try:
                message = str(response.json().get("message", ""))
            except ValueError:
                message = response.text[:200]
            raise KubernetesError(
                f"{self.cluster.resource}: {method} {path}: HTTP {response.status_code}"
                f" {message}".rstrip()
            )
        return response

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError as exc:
            raise KubernetesError(f"{self.cluster.resource}: the API answered non-JSON") from exc
        if not isinstance(body, dict):
            raise KubernetesError(f"{self.cluster.resource}: the API answered {body!r}")
        return body

    def nodes(self, selector: str) -> Iterator[dict[str, Any]]:
        """Every node matching the label ``selector``, page by page."""
        token = ""
        while True:
            params = {"labelSelector": selector, "limit": str(_PAGE)}
            if token:
                params["continue"] = token
            body = self._json(self._request("GET", NODES, params=params))
            yield from body.get("items") or []
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return

    def node(self, name: str) -> dict[str, Any]:
        return self._json(self._request("GET", f"{NODES}/{name}"))

    def patch(self, name: str, patch: Mapping[str, Any]) -> bool:
        """Apply a strategic-merge patch; false on 409 Conflict (the node changed)."""
        response = self._request(
            "PATCH",
            f"{NODES}/{name}",
            json=patch,
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )
        return response.status_code != 409


def _taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def _tainted(node: Mapping[str, Any]) -> bool:
    return any(t.get("key") == TAINT_KEY for t in _taints(node))


def evacuate_patch(node: Mapping[str, Any], zone_id: str, effect: str) -> dict[str, Any] | None:
    """The patch that cordons and taints ``node`` (None if it already carries the taint)."""
    if _tainted(node):
        return None
    spec = node.get("spec") or {}
    metadata: dict[str, Any] = {"resourceVersion": node["metadata"]["resourceVersion"]}
    if not spec.get("unschedulable"):
        metadata["annotations"] = {CORDONED_ANNOTATION: "true"}
    taint = {"key": TAINT_KEY, "value": zone_id, "effect": effect}
    return {
        "metadata": metadata,
        "spec": {"unschedulable": True, "taints": [*_taints(node), taint]},
    }


def recover_patch(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The patch that lifts rideout's taint (and its cordon), or None if there is none."""
    if not _tainted(node):
        return None
    kept = [t for t in _taints(node) if t.get("key") != TAINT_KEY]
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    spec: dict[str, Any] = {"taints": kept or None}  # null deletes the field
    if annotations.get(CORDONED_ANNOTATION) == "true":
        spec["unschedulable"] = None
    return {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "annotations": {CORDONED_ANNOTATION: None},
        },
        "spec": spec,
    }


class EksNodes:
    """The ``eks`` kind: one placement per configured cluster."""

    kind = KIND

    def __init__(
        self,
        clusters: Sequence[EksCluster],
        zones: ZoneDirectory,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._apis = {c.resource: KubernetesApi(c, transport=transport) for c in clusters}
        self._zones = zones

    def close(self) -> None:
        for api in self._apis.values():
            api.close()

    def _zone_id(self, node: Mapping[str, Any]) -> str | None:
        name = ((node.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL)
        return self._zones.id_of(str(name)) if name else None

    def _placement(self, api: KubernetesApi) -> Placement:
        schedulable: set[str] = set()
        for node in api.nodes(ZONE_LABEL):
            zone_id = self._zone_id(node)
            if zone_id is not None and not _tainted(node):
                schedulable.add(zone_id)
        return Placement(KIND, api.cluster.resource, tuple(sorted(schedulable)))

    def placements(self) -> Iterator[Placement]:
        for api in self._apis.values():
            yield self._placement(api)

    def describe(self, resource: str) -> Placement | None:
        api = self._apis.get(resource)
        return None if api is None else self._placement(api)

    def _apply(
        self, api: KubernetesApi, node: dict[str, Any], zone_id: str, evacuate: bool
    ) -> bool:
        """Evacuate or recover one node; true if it was changed."""
        name = node["metadata"]["name"]
        for _ in range(_CONFLICT_ATTEMPTS):
            patch = (
                evacuate_patch(node, zone_id, api.cluster.effect)
                if evacuate
                else recover_patch(node)
            )
            if patch is None:
                return False
            if api.patch(name, patch):
                return True
            node = api.node(name)  # 409: changed since read; recompute from a fresh read
        raise KubernetesError(f"{api.cluster.resource}: node {name} kept changing; try again")

    def update(
        self, resource: str, subnets: tuple[str, ...], *, expected: tuple[str, ...] | None = None
    ) -> None:
        """Taint and cordon the nodes of every zone not in ``subnets`` (zone ids); lift
        rideout's taint from the nodes of the zones in it. All or nothing, as far as the
        API allows: if one node fails, the nodes already changed are put back, so the
        cluster is as it was (what the engine's ledger then says) or the error says not."""
        api = self._apis.get(resource)
        if api is None:
            raise KubernetesError(f"eks: no cluster {resource} configured")
        require_unchanged(KIND, resource, self._placement(api).subnets, expected)
        keep = frozenset(subnets)
        zone_names = {
            z: self._zones.name_of(z)
            for z in {self._zone_id(n) for n in api.nodes(ZONE_LABEL)} | keep
            if z is not None
        }
        changed: list[tuple[str, str, bool]] = []  # (node, zone id, evacuated)
        try:
            for zone_id, name in sorted(zone_names.items()):
                for node in api.nodes(f"{ZONE_LABEL}={name}"):
                    if self._apply(api, node, zone_id, evacuate=zone_id not in keep):
                        changed.append((node["metadata"]["name"], zone_id, zone_id not in keep))
        except KubernetesError as exc:
            left = self._undo(api, changed)
            state = (
                "the nodes changed before it were put back"
                if not left
                else f"{', '.join(left)} could not be put back: run the same command again"
            )
            raise KubernetesError(f"{exc} ({state})") from exc

    def _undo(self, api: KubernetesApi, changed: list[tuple[str, str, bool]]) -> list[str]:
        """Put back the nodes ``update`` changed; the names of those it could not."""
        left = []
        for name, zone_id, evacuated in reversed(changed):
            try:
                self._apply(api, api.node(name), zone_id, evacuate=not evacuated)
            except KubernetesError:
                left.append(name)
        return left
