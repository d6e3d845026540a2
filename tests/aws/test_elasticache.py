"""The Global Datastore in plan, apply and destroy: created on the primary's group or
adopted, the secondary's group created into it, and only what rideout made deleted.

moto has no Global Datastore API (HTTP 500 "not implemented" for create, describe and
failover), so these tests run the ElastiCache provider against botocore's Stubber: it
validates every request against the service model and the parameters expected here,
and answers with responses shaped like AWS's documented ones. What they cannot show:
AWS's own timing (minutes per step) and the datastore's replication itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from rideout.aws import AwsError, AwsPreconditionFailed, AwsSession, apply_plan, diff
from rideout.aws.desired import desired_state
from rideout.aws.elasticache import OWNER_TAG, observe_elasticache, wait_for
from rideout.config import Config
from tests.aws.stubs import datastore, stubbed

P, S = "us-east-1", "us-west-2"
ARN1 = "arn:aws:elasticache:us-east-1:123456789012:replicationgroup:auction-use1"
ARN2 = "arn:aws:elasticache:us-west-2:123456789012:replicationgroup:auction-usw2"
GLOBAL_ID = "ldgnf-auction"
DESCRIBE = {"ShowMemberInfo": True}


def elasticache_config(make_config: Callable[..., Config]) -> Config:
    return make_config(
        aws={
            "deployment": "auction-test",
            "global_datastore": "auction",
            "regions": {
                P: {"replication_group": "auction-use1"},
                S: {"replication_group": "auction-usw2", "cache_subnet_group": "private"},
            },
        }
    )


Account = tuple[Config, AwsSession, Stubber, Stubber]


@pytest.fixture
def account(make_config: Callable[..., Config]) -> Account:
    """The config, and a session whose ElastiCache clients in both regions are stubbed."""
    config = elasticache_config(make_config)
    session = AwsSession()
    return config, session, stubbed(session, "elasticache", P), stubbed(session, "elasticache", S)


def group(ident: str, arn: str, joined: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"ReplicationGroupId": ident, "ARN": arn, "Status": "available"}
    if joined:
        body["GlobalReplicationGroupInfo"] = {"GlobalReplicationGroupId": joined}
    return {"ReplicationGroups": [body]}


def not_found(stub: Stubber, ident: str) -> None:
    stub.add_client_error(
        "describe_replication_groups", service_error_code="ReplicationGroupNotFoundFault",
        http_status_code=404, expected_params={"ReplicationGroupId": ident},
    )  # fmt: skip


def expect_nothing(east: Stubber, west: Stubber) -> None:
    """What observe_elasticache reads in an account with neither the datastore nor the
    secondary's group."""
    east.add_response(
        "describe_global_replication_groups", {"GlobalReplicationGroups": []}, DESCRIBE
    )
    not_found(west, "auction-usw2")


def expect_observed(
    east: Stubber,
    west: Stubber,
    members: list[tuple[str, str, str]],
    *,
    owner: bool,
    joined: str | None,
    secondary_owned: bool,
) -> None:
    """The answers observe_elasticache reads when the datastore and both groups exist:
    the datastore with `members`, the primary's group (marked as rideout's if `owner`),
    the secondary's group (in datastore `joined`, tagged if `secondary_owned`)."""
    east.add_response("describe_global_replication_groups", datastore(GLOBAL_ID, members), DESCRIBE)
    east.add_response(
        "describe_replication_groups", group("auction-use1", ARN1),
        {"ReplicationGroupId": "auction-use1"},
    )  # fmt: skip
    mark = [{"Key": OWNER_TAG, "Value": "auction-test"}] if owner else []
    east.add_response("list_tags_for_resource", {"TagList": mark}, {"ResourceName": ARN1})
    west.add_response(
        "describe_replication_groups", group("auction-usw2", ARN2, joined),
        {"ReplicationGroupId": "auction-usw2"},
    )  # fmt: skip
    tag = [{"Key": "rideout:deployment", "Value": "auction-test"}] if secondary_owned else []
    west.add_response("list_tags_for_resource", {"TagList": tag}, {"ResourceName": ARN2})


def elasticache_only(config: Config) -> list[Any]:
    return [r for r in desired_state(config) if r.kind.startswith("elasticache")]


def test_create_on_the_primary_group_then_add_the_secondary(
    account: Account,
) -> None:
    config, session, east, west = account
    expect_nothing(east, west)  # observe: no datastore, no secondary group
    plan = diff(elasticache_only(config), observe_elasticache(session, config))
    assert [(c.action, c.kind) for c in plan.changes] == [
        ("create", "elasticache-global-datastore"),
        ("create", "elasticache-replication-group"),
    ]
    # apply: the datastore on the existing primary group, marked as rideout's, then
    # (once available) the secondary group created into it, tagged
    east.add_response(
        "describe_replication_groups",
        group("auction-use1", ARN1),
        {"ReplicationGroupId": "auction-use1"},
    )
    east.add_response(
        "create_global_replication_group",
        {"GlobalReplicationGroup": {"GlobalReplicationGroupId": GLOBAL_ID, "Status": "creating"}},
        {
            "GlobalReplicationGroupIdSuffix": "auction",
            "GlobalReplicationGroupDescription": "rideout auction-test",
            "PrimaryReplicationGroupId": "auction-use1",
        },
    )
    east.add_response(
        "add_tags_to_resource", {"TagList": []},
        {"ResourceName": ARN1, "Tags": [{"Key": OWNER_TAG, "Value": "auction-test"}]},
    )  # fmt: skip
    east.add_response(
        "describe_global_replication_groups",
        datastore(GLOBAL_ID, [("auction-use1", P, "PRIMARY")], "creating"),
        DESCRIBE,
    )
    east.add_response(
        "describe_global_replication_groups",
        datastore(GLOBAL_ID, [("auction-use1", P, "PRIMARY")]),
        DESCRIBE,
    )
    west.add_response(
        "create_replication_group",
        {"ReplicationGroup": {"ReplicationGroupId": "auction-usw2"}},
        {
            "ReplicationGroupId": "auction-usw2",
            "ReplicationGroupDescription": ANY,
            "GlobalReplicationGroupId": GLOBAL_ID,
            "CacheSubnetGroupName": "private",
            "Tags": [
                {"Key": "rideout:deployment", "Value": "auction-test"},
                {"Key": "rideout:region", "Value": S},
            ],
        },
    )
    result = apply_plan(session, config, plan, sleep=lambda _: None)
    assert result.error is None, result.error
    east.assert_no_pending_responses()
    west.assert_no_pending_responses()

    # plan again: both found, both rideout's: nothing to do
    expect_observed(
        east, west, [("auction-use1", P, "PRIMARY"), ("auction-usw2", S, "SECONDARY")],
        owner=True, joined=GLOBAL_ID, secondary_owned=True,
    )  # fmt: skip
    found = observe_elasticache(session, config)
    assert diff(elasticache_only(config), found).empty
    assert all(r.owned for r in found)

    # destroy: detach and delete the secondary, then delete the datastore keeping the
    # primary's group (and take rideout's mark off it)
    destroy = diff([], found)
    assert [(c.action, c.kind) for c in destroy.changes] == [
        ("delete", "elasticache-replication-group"),
        ("delete", "elasticache-global-datastore"),
    ]
    east.add_response(
        "describe_global_replication_groups",
        datastore(GLOBAL_ID, [("auction-use1", P, "PRIMARY"), ("auction-usw2", S, "SECONDARY")]),
        DESCRIBE,
    )
    east.add_response(
        "disassociate_global_replication_group", {"GlobalReplicationGroup": {}},
        {"GlobalReplicationGroupId": GLOBAL_ID, "ReplicationGroupId": "auction-usw2", "ReplicationGroupRegion": S},
    )  # fmt: skip
    east.add_response(
        "describe_global_replication_groups",
        datastore(GLOBAL_ID, [("auction-use1", P, "PRIMARY")]),
        DESCRIBE,
    )
    west.add_response(
        "delete_replication_group", {"ReplicationGroup": {}}, {"ReplicationGroupId": "auction-usw2"}
    )
    east.add_response(
        "delete_global_replication_group", {"GlobalReplicationGroup": {}},
        {"GlobalReplicationGroupId": GLOBAL_ID, "RetainPrimaryReplicationGroup": True},
    )  # fmt: skip
    east.add_response(
        "describe_replication_groups",
        group("auction-use1", ARN1),
        {"ReplicationGroupId": "auction-use1"},
    )
    east.add_response(
        "remove_tags_from_resource", {"TagList": []}, {"ResourceName": ARN1, "TagKeys": [OWNER_TAG]}
    )
    result = apply_plan(session, config, destroy, sleep=lambda _: None)
    assert result.error is None, result.error
    east.assert_no_pending_responses()
    west.assert_no_pending_responses()


def test_an_existing_datastore_is_adopted_and_never_destroyed(
    account: Account,
) -> None:
    config, session, east, west = account
    expect_observed(
        east, west, [("auction-use1", P, "PRIMARY"), ("auction-usw2", S, "SECONDARY")],
        owner=False, joined=GLOBAL_ID, secondary_owned=False,
    )  # fmt: skip
    found = observe_elasticache(session, config)
    assert diff(elasticache_only(config), found).empty  # adopted as it is
    assert not any(r.owned for r in found)
    assert diff([], found).empty  # destroy leaves what rideout did not create


def test_a_missing_primary_group_is_a_clear_precondition(
    account: Account,
) -> None:
    config, session, east, west = account
    expect_nothing(east, west)
    plan = diff(elasticache_only(config), observe_elasticache(session, config))
    not_found(east, "auction-use1")
    result = apply_plan(session, config, plan, sleep=lambda _: None)
    assert isinstance(result.error, AwsPreconditionFailed)
    assert "auction-use1" in str(result.error)
    assert "does not exist" in str(result.error)
    assert result.done == []


def test_a_standalone_secondary_group_is_refused_not_replaced(
    account: Account,
) -> None:
    config, session, east, west = account
    expect_observed(
        east, west, [("auction-use1", P, "PRIMARY")],
        owner=True, joined=None, secondary_owned=False,
    )  # fmt: skip
    plan = diff(elasticache_only(config), observe_elasticache(session, config))
    assert [(c.action, c.kind) for c in plan.changes] == [
        ("update", "elasticache-replication-group")
    ]
    result = apply_plan(session, config, plan, sleep=lambda _: None)
    assert isinstance(result.error, AwsPreconditionFailed)
    assert "outside the Global Datastore" in str(result.error)


@pytest.mark.parametrize("suffix", ["auction", "ldgnf-auction"])
def test_the_datastore_is_found_by_its_suffix(
    suffix: str, make_config: Callable[..., Config]
) -> None:
    from rideout.aws.elasticache import find_datastore

    session = AwsSession()
    east = stubbed(session, "elasticache", P)
    east.add_response("describe_global_replication_groups", datastore(suffix, []), DESCRIBE)
    found = find_datastore(session, P, "auction")
    assert found is not None
    assert found["GlobalReplicationGroupId"] == suffix


def test_wait_for_polls_after_1_s_doubling_up_to_15_s_until_the_timeout() -> None:
    checks = iter([False] * 6 + [True])
    slept: list[float] = []
    wait_for(lambda: next(checks), "it", timeout=3600, sleep=slept.append)
    assert slept == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0]
    with pytest.raises(AwsError, match=r"timed out after 0\.5 s waiting for never"):
        wait_for(lambda: False, "never", timeout=0.5, sleep=slept.append)
