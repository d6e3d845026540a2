"""rideout on AWS: Route 53, CloudWatch and ElastiCache from the deployment's config.

`rideout aws plan|apply|destroy` (:mod:`~rideout.aws.engine`) keeps the account in the
state :func:`~rideout.aws.desired.desired_state` describes; the canary's CloudWatch
publisher (:mod:`~rideout.aws.metrics`) and the controller's ElastiCache writer
(:mod:`~rideout.aws.writer`) plug into the ports of ``health`` and ``failover``. boto3
is the ``aws`` extra: importing this package needs it.
"""

from __future__ import annotations

from rideout.aws.engine import ApplyResult, apply_plan, destroy_plan, make_plan, observe
from rideout.aws.errors import (
    AwsCredentialsMissing,
    AwsError,
    AwsPreconditionFailed,
    AwsRequestFailed,
    AwsUnreachable,
)
from rideout.aws.plan import Change, FieldChange, Plan, Resource, diff
from rideout.aws.session import AwsSession

__all__ = [
    "ApplyResult",
    "AwsCredentialsMissing",
    "AwsError",
    "AwsPreconditionFailed",
    "AwsRequestFailed",
    "AwsSession",
    "AwsUnreachable",
    "Change",
    "FieldChange",
    "Plan",
    "Resource",
    "apply_plan",
    "destroy_plan",
    "diff",
    "make_plan",
    "observe",
]
