"""botocore Stubber helpers: a client whose every request is checked against the
service model (parameter names, types, required fields) and against what the test
expects, and which answers with the responses the test gives."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.stub import Stubber

from rideout.aws import AwsSession


def stubbed(session: AwsSession, service: str, region: str) -> Stubber:
    """A stubbed `service` client in `region`, installed into `session`; activate it."""
    client: Any = boto3.client(
        service,  # type: ignore[call-overload]
        region_name=region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        endpoint_url=f"https://{service}.{region}.invalid",
    )
    session.add_client(service, region, client)
    stub = Stubber(client)
    stub.activate()
    return stub


def datastore(
    ident: str, members: list[tuple[str, str, str]], status: str = "available"
) -> dict[str, Any]:
    """A DescribeGlobalReplicationGroups answer with one datastore of (group, region, role)."""
    return {
        "GlobalReplicationGroups": [
            {
                "GlobalReplicationGroupId": ident,
                "Status": status,
                "Members": [
                    {
                        "ReplicationGroupId": g,
                        "ReplicationGroupRegion": r,
                        "Role": role,
                        "Status": "associated",
                    }
                    for g, r, role in members
                ],
            }
        ]
    }
