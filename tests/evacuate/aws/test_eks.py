"""EKS: nodes of a zone cordoned and tainted through the Kubernetes API, lifted on recovery.

There is no Kubernetes API server here: the tests run a stand-in (``kubeapi.py``) on
loopback that answers the documented node requests (list by label selector with
pagination, get, strategic-merge patch with a resourceVersion precondition) and
records them. Zone names come from EC2 (moto in server mode), as on AWS.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.evacuate.aws import AwsProvider, AwsSettings, KubernetesError
from rideout.evacuate.aws.eks import (
    CORDONED_ANNOTATION,
    TAINT_KEY,
    ZONE_LABEL,
    EksCluster,
    _RefreshingToken,
    evacuate_patch,
    recover_patch,
    sts_token,
)
from rideout.evacuate.dynamo import DynamoLedger
from rideout.evacuate.engine import EXIT_OK, Engine, Options
from rideout.evacuate.model import Placement
from tests.conftest import FakeClock
from tests.evacuate.aws.conftest import SESSION, ledger_items
from tests.evacuate.aws.kubeapi import PATCH_TYPE, FakeKubernetes, merge, serving_kubernetes

CLUSTER = "arn:aws:eks:us-east-1:123456789012:cluster/prod"
TOKEN = "k8s-aws-v1.test-token"


@pytest.fixture
def zones(aws: AwsSettings) -> list[tuple[str, str]]:
    """(zone id, zone name) of the region's first three zones, as EC2 reports them."""
    found = SESSION.client("ec2").describe_availability_zones()["AvailabilityZones"][:3]
    return [(z["ZoneId"], z["ZoneName"]) for z in found]


@pytest.fixture
def kube(zones: list[tuple[str, str]]) -> Iterator[tuple[FakeKubernetes, str]]:
    fake = FakeKubernetes(token=TOKEN, page_size=2)  # small pages: pagination is exercised
    for i, (_, name) in enumerate(zones):
        for j in range(3):
            fake.add_node(f"n{i}-{j}", name)
    fake.add_node("unlabelled", None)
    # An operator had cordoned this one and tainted it for their own reasons.
    fake.nodes["n1-2"]["spec"] = {
        "unschedulable": True,
        "taints": [{"key": "maintenance", "value": "disk", "effect": "NoSchedule"}],
    }
    with serving_kubernetes(fake) as url:
        yield fake, url


def specs(fake: FakeKubernetes) -> dict[str, dict[str, object]]:
    """Every node's spec, by name (a copy)."""
    return {name: copy.deepcopy(node["spec"]) for name, node in fake.nodes.items()}


@dataclass
class Eks:
    """A test's EKS setup: the stand-in API server, the zones, providers made on it."""

    aws: AwsSettings
    fake: FakeKubernetes
    url: str
    zones: list[tuple[str, str]]
    made: list[AwsProvider] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [z for z, _ in self.zones]

    def without(self, index: int) -> tuple[str, ...]:
        """The zone ids but the one at `index`: the placement that evacuates it."""
        return tuple(z for i, z in enumerate(self.ids) if i != index)

    def provider(self, token: str = TOKEN) -> AwsProvider:
        """An AwsProvider for the cluster with `token` (closed after the test)."""
        cluster = EksCluster(CLUSTER, self.url, token, timeout=30)
        self.made.append(AwsProvider(self.aws, eks=[cluster]))
        return self.made[-1]


@pytest.fixture
def eks(
    aws: AwsSettings, kube: tuple[FakeKubernetes, str], zones: list[tuple[str, str]]
) -> Iterator[Eks]:
    fake, url = kube
    setup = Eks(aws, fake, url, zones)
    yield setup
    for p in setup.made:
        p.close()


def test_evacuate_and_recover_a_zone(eks: Eks) -> None:
    fake, p, ids = eks.fake, eks.provider(), eks.ids
    assert p.kinds() == ("asg", "ecs", "lambda", "eks")
    assert list(p.placements("eks")) == [Placement("eks", CLUSTER, tuple(sorted(ids)))]
    zone_id, zone_name = eks.zones[1]
    assert zone_id in p.subnets_in_zone(zone_id)
    before = specs(fake)

    fake.requests.clear()
    kept = eks.without(1)
    p.update("eks", CLUSTER, kept)
    assert p.describe("eks", CLUSTER) == Placement("eks", CLUSTER, tuple(sorted(kept)))
    for name, node in fake.nodes.items():
        in_zone = node["metadata"]["labels"].get(ZONE_LABEL) == zone_name
        taints = node["spec"].get("taints", [])
        ours = [t for t in taints if t["key"] == TAINT_KEY]
        if not in_zone:
            assert node["spec"] == before[name], name
            continue
        assert ours == [{"key": TAINT_KEY, "value": zone_id, "effect": "NoExecute"}]
        assert node["spec"]["unschedulable"] is True
        annotations = node["metadata"].get("annotations", {})
        # rideout notes the cordon only where it was the one to cordon.
        assert (CORDONED_ANNOTATION in annotations) == (name != "n1-2")
    assert {"key": "maintenance", "value": "disk", "effect": "NoSchedule"} in fake.nodes["n1-2"][
        "spec"
    ]["taints"]

    # The documented requests: a label-selector list per zone (paginated), then patches.
    lists = [r for r in fake.requests if r["method"] == "GET" and r["path"] == "/api/v1/nodes"]
    assert {"labelSelector": f"{ZONE_LABEL}={zone_name}", "limit": "500"} in [
        r["query"] for r in lists
    ]
    assert any("continue" in r["query"] for r in lists)
    patches = [r for r in fake.requests if r["method"] == "PATCH"]
    assert sorted(r["path"] for r in patches) == [f"/api/v1/nodes/n1-{j}" for j in range(3)]
    assert all(r["content_type"] == PATCH_TYPE for r in patches)
    assert all(r["body"]["metadata"]["resourceVersion"] for r in patches)

    fake.requests.clear()
    p.update("eks", CLUSTER, kept)  # re-running changes nothing
    assert not [r for r in fake.requests if r["method"] == "PATCH"]

    p.update("eks", CLUSTER, tuple(ids))
    assert specs(fake) == before
    assert not any(
        CORDONED_ANNOTATION in n["metadata"].get("annotations", {}) for n in fake.nodes.values()
    )


def test_a_node_changed_under_the_patch_is_read_again(eks: Eks) -> None:
    fake = eks.fake
    fake.conflicts = 2
    eks.provider().update("eks", CLUSTER, eks.without(0))
    conflicts = [r for r in fake.requests if r["method"] == "GET" and r["path"].count("/") == 4]
    assert len(conflicts) == 2  # two 409s, two fresh reads of the node
    assert all(
        any(t["key"] == TAINT_KEY for t in fake.nodes[f"n0-{j}"]["spec"]["taints"])
        for j in range(3)
    )


def test_a_failed_node_puts_the_others_back(eks: Eks) -> None:
    fake = eks.fake
    before = specs(fake)
    fake.broken = {"n0-2": 0}  # sorted last of its zone: n0-0 and n0-1 are patched first
    p = eks.provider()
    with pytest.raises(KubernetesError, match=r"HTTP 500.*put back"):
        p.update("eks", CLUSTER, eks.without(0))
    assert specs(fake) == before
    assert len([r for r in fake.requests if r["method"] == "PATCH"]) == 5  # 2 + 1 + 2 undone
    fake.broken = {"n0-2": 0, "n0-0": 1}  # and the undo of n0-0 fails: the error says so
    with pytest.raises(KubernetesError, match="n0-0 could not be put back"):
        p.update("eks", CLUSTER, eks.without(0))


def test_a_refused_token_is_a_kubernetes_error(eks: Eks) -> None:
    with pytest.raises(KubernetesError, match="HTTP 401"):
        list(eks.provider(token="wrong").placements("eks"))


def test_an_unreachable_api_is_a_kubernetes_error(aws: AwsSettings) -> None:
    dead = [EksCluster(CLUSTER, "http://127.0.0.1:9", TOKEN, timeout=5)]
    with AwsProvider(aws, eks=dead) as p:
        with pytest.raises(KubernetesError, match="ConnectError"):
            p.describe("eks", CLUSTER)
        assert p.describe("eks", "arn:aws:eks:us-east-1:123456789012:cluster/other") is None


def node(spec: dict[str, object], annotations: dict[str, str] | None = None) -> dict[str, object]:
    metadata: dict[str, object] = {"name": "n", "resourceVersion": "7"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def test_the_patches_are_pure() -> None:
    fresh = node({})
    patch = evacuate_patch(fresh, "use1-az2", "NoExecute")
    assert patch == {
        "metadata": {"resourceVersion": "7", "annotations": {CORDONED_ANNOTATION: "true"}},
        "spec": {
            "unschedulable": True,
            "taints": [{"key": TAINT_KEY, "value": "use1-az2", "effect": "NoExecute"}],
        },
    }
    tainted = node(patch["spec"], {CORDONED_ANNOTATION: "true"})
    assert evacuate_patch(tainted, "use1-az2", "NoExecute") is None
    assert recover_patch(tainted) == {
        "metadata": {"resourceVersion": "7", "annotations": {CORDONED_ANNOTATION: None}},
        "spec": {"taints": None, "unschedulable": None},
    }
    assert recover_patch(fresh) is None
    other = {"key": "x", "effect": "NoSchedule"}
    theirs = node({"unschedulable": True, "taints": [other]})
    patch = evacuate_patch(theirs, "use1-az2", "NoSchedule")
    assert patch is not None
    assert "annotations" not in patch["metadata"]
    assert recover_patch(node(patch["spec"])) == {
        "metadata": {"resourceVersion": "7", "annotations": {CORDONED_ANNOTATION: None}},
        "spec": {"taints": [other]},
    }


def test_the_sts_token_is_a_presigned_get_caller_identity(aws: AwsSettings) -> None:
    """As ``aws eks get-token`` makes it. The URL's signed parts are checked here; moto
    in server mode cannot be asked to verify it (it routes an unsigned-header GET to its
    S3 backend), and only EKS's authenticator does on AWS."""
    token = sts_token(aws, "prod")
    assert token.startswith("k8s-aws-v1.")
    encoded = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    query = parse_qs(urlsplit(url).query)
    assert query["Action"] == ["GetCallerIdentity"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert query["X-Amz-Expires"] == ["60"]
    assert query["X-Amz-Credential"][0].endswith("/us-east-1/sts/aws4_request")
    assert query["X-Amz-Credential"][0].startswith("testing/")
    assert len(query["X-Amz-Signature"][0]) == 64


def test_a_signed_cluster_sends_its_sts_token(eks: Eks) -> None:
    cluster = EksCluster.signed(eks.aws, CLUSTER, eks.url)
    assert cluster.name == "prod"
    assert callable(cluster.token)
    eks.fake.token = cluster.token()  # what the API server's authenticator would accept
    with AwsProvider(eks.aws, eks=[cluster]) as p:
        assert p.describe("eks", CLUSTER) == Placement("eks", CLUSTER, tuple(sorted(eks.ids)))


def test_the_token_is_made_anew_every_ten_minutes() -> None:
    clock, made = FakeClock(), []

    def make() -> str:
        made.append(clock.now)
        return f"t{len(made)}"

    token = _RefreshingToken(make, clock)
    assert token() == token() == "t1"
    clock.advance(599)
    assert token() == "t1"
    clock.advance(1)
    assert token() == "t2"


taint = st.fixed_dictionaries(
    {"key": st.sampled_from(["a", "b", "node.kubernetes.io/unreachable"]),
     "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])},
    optional={"value": st.text(max_size=5)},
)  # fmt: skip


@given(
    taints=st.lists(taint, max_size=4),
    cordoned=st.booleans(),
    annotations=st.none() | st.dictionaries(st.sampled_from(["x", "y"]), st.text(max_size=3)),
)
def test_evacuating_then_recovering_any_node_restores_it(
    taints: list[dict[str, str]], cordoned: bool, annotations: dict[str, str] | None
) -> None:
    spec: dict[str, object] = {}
    if taints:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
    original = node(dict(spec), annotations)
    patched = merge(
        copy.deepcopy(original), evacuate_patch(original, "use1-az1", "NoExecute") or {}
    )
    assert patched["spec"]["unschedulable"] is True
    assert any(t["key"] == TAINT_KEY for t in patched["spec"]["taints"])
    restored = merge(copy.deepcopy(patched), recover_patch(patched) or {})
    for data in (original, restored):
        data["metadata"].pop("resourceVersion", None)
        if not data["metadata"].get("annotations"):
            data["metadata"].pop("annotations", None)
    assert restored == original


def test_through_the_engine_and_the_ledger(eks: Eks) -> None:
    fake = eks.fake
    before = specs(fake)
    engine = Engine(eks.provider(), DynamoLedger(eks.aws, wait_delay=1))
    zone_id = eks.ids[0]
    outcome = engine.evacuate(zone_id, Options(kinds=("eks",), operator="bob"))
    assert outcome.exit_code == EXIT_OK, outcome
    (row,) = engine.ledger.records(kind="eks")
    assert (row.zone_id, row.resource, row.removed) == (zone_id, CLUSTER, (zone_id,))
    # The row as a plain boto3 read of the table sees it: nodes are placed by zone, so
    # the zone ids stand for subnets, and a node has no network configuration to record.
    assert ledger_items(zone_id) == {
        ("eks", CLUSTER): {
            "zone_id": {"S": zone_id},
            "resource": {"S": CLUSTER},
            "kind": {"S": "eks"},
            "removed": {"L": [{"S": zone_id}]},
            "operator": {"S": "bob"},
            "before": {"L": sorted(({"S": z} for z in eks.ids), key=lambda v: v["S"])},
            "seen": {"M": {}},
            "outcome": {"S": "removed"},
        }
    }
    tainted = {n for n, node in fake.nodes.items() if any(
        t["key"] == TAINT_KEY for t in node["spec"].get("taints", []))}  # fmt: skip
    assert tainted == {f"n0-{j}" for j in range(3)}
    assert engine.recover(zone_id).exit_code == EXIT_OK
    assert specs(fake) == before
    assert engine.ledger.records() == []


def test_the_token_never_travels_in_clear_text_off_the_machine() -> None:
    with pytest.raises(ValueError, match="server must be an https:// URL"):
        EksCluster(CLUSTER, "http://k8s.example:6443", TOKEN)
    assert EksCluster(CLUSTER, "https://k8s.example:6443", TOKEN).server.startswith("https")
    assert TOKEN not in repr(EksCluster(CLUSTER, "http://127.0.0.1:1", TOKEN))
