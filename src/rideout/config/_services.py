"""The services a deployment reaches: each region's Redis (and its TLS), and AWS."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from urllib.parse import urlsplit

from rideout._validate import secure_url
from rideout.config._reader import _NAME, ConfigError, _address, _kind, _Reader, _scalars
from rideout.errors import InvalidArgument

__all__ = [
    "AwsConfig",
    "AwsRegionConfig",
    "EvacuateAwsConfig",
    "RedisAccessConfig",
    "RedisConfig",
    "RedisTLS",
    "region_env_name",
]

_AWS_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$")
_AWS_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,39}$")


@dataclass(frozen=True, slots=True)
class RedisTLS:
    """How a client reaches a ``rediss://`` server: whom to trust, what to present.

    Empty ``ca_file``: the system's trust store (managed Redis with a public CA).
    ``cert_file`` and ``key_file`` together: mutual TLS.
    """

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    check_hostname: bool = True


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """Where a region's Redis listens (spawned locally in ``local`` mode).

    In ``external`` mode ``url`` (``redis://HOST:PORT`` or ``rediss://HOST:PORT``) may
    name it instead of an IP address; ``address`` is then the URL's host, and ``tls``
    is set for ``rediss://``.
    """

    address: str
    port: int
    url: str = ""
    tls: RedisTLS | None = None


@dataclass(frozen=True, slots=True)
class RedisAccessConfig:
    """External mode: the ACL users rideout's parts reach Redis as, and TLS defaults.

    Each role's password comes from its ``*_password_file`` (a mounted secret), else
    from ``password_file``. The TLS files apply to every ``rediss://`` URL that does not
    set its own. Local mode ignores this section: `rideout up` makes its own users.
    """

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    check_hostname: bool = True
    password_file: str = ""
    app_user: str = "rideout-app"
    app_password_file: str = ""
    controller_user: str = "rideout-controller"
    controller_password_file: str = ""
    monitor_user: str = "rideout-monitor"
    monitor_password_file: str = ""


@dataclass(frozen=True, slots=True)
class EvacuateAwsConfig:
    """``rideout evacuate|recover --provider aws``: where the resources and the ledger are.

    An empty string means "not set": the region and endpoint then come from boto3's own
    resolution (``AWS_REGION``/``AWS_DEFAULT_REGION``, the profile, ``AWS_ENDPOINT_URL``).
    The EKS bearer token is made from the AWS credentials (as ``aws eks get-token``
    does) or read from ``eks_token_file`` when the command runs; it is never part of the
    configuration (``config show`` prints the path only).
    """

    region: str = ""
    profile: str = ""
    endpoint_url: str = ""
    table: str = "rideout-evacuations"  # the DynamoDB ledger (created if missing)
    vpc_ids: tuple[str, ...] = ()  # limit subnet lookups to these VPCs (default: all)
    max_attempts: int = 5  # per AWS call, throttling included (botocore standard retries)
    zonal_shift: bool = False  # also shift ARC-managed load balancers away (type arc-zonal-shift)
    zonal_shift_resources: tuple[str, ...] = ()  # their ARNs (default: every managed one)
    zonal_shift_expires_in: str = "12h"  # a shift's expiry: minutes or hours, at most 72h
    eks_cluster: str = ""  # the EKS cluster's ARN (type eks; empty: no eks)
    eks_server: str = ""  # its Kubernetes API endpoint (https://...)
    eks_ca_file: str = ""  # its CA bundle (default: the system's)
    eks_token_file: str = ""  # a file holding a bearer token ("": made from AWS credentials)
    dashboard: bool = False  # the dashboard's ledger panel also shows this table


@dataclass(frozen=True, slots=True)
class AwsRegionConfig:
    """How one rideout region maps onto AWS (``[aws.regions.<region>]``)."""

    name: str  # the rideout region
    aws_region: str  # the AWS region it runs in (default: the same name)
    # The app domain's record for this region: A records with these addresses, or
    # (record_type = "alias") an alias to a load balancer's or API's DNS name.
    addresses: tuple[str, ...] = ()
    alias_dns_name: str = ""
    alias_hosted_zone_id: str = ""
    alarm_name: str = ""  # the region's canary alarm (default: see AwsConfig.alarm_name)
    replication_group: str = ""  # the region's ElastiCache replication group id
    cache_subnet_group: str = ""  # where apply creates the secondary's replication group


@dataclass(frozen=True, slots=True)
class AwsConfig:
    """`rideout aws plan|apply|destroy`, the canary's PutMetricData, ``--provider aws``."""

    deployment: str = "rideout"  # tagged rideout:deployment=<this> on what rideout creates
    hosted_zone_id: str = ""  # the app domain's Route 53 hosted zone; empty: not managed
    record_type: str = "A"  # A | alias
    # Where the canary alarms live and the canaries publish: default the secondary's AWS
    # region, so failing over never depends on the region that failed.
    alarm_region: str = ""
    period: int = 60  # seconds per CloudWatch datapoint: 10, 30 or a multiple of 60
    insufficient_data_health: str = "Unhealthy"  # Healthy | Unhealthy | LastKnownStatus
    publish_metrics: bool = False  # the canary also calls PutMetricData (besides ingest)
    global_datastore: str = ""  # ElastiCache Global Datastore id suffix; empty: not managed
    tags: tuple[tuple[str, str], ...] = ()  # added to everything rideout creates
    regions: tuple[AwsRegionConfig, ...] = ()

    def region(self, name: str) -> AwsRegionConfig:
        """The AWS settings of rideout region `name` (defaults when it has none)."""
        for region in self.regions:
            if region.name == name:
                return region
        return AwsRegionConfig(name=name, aws_region=name)

    def alarm_name(self, region: str) -> str:
        """The canary alarm of rideout region `region`."""
        return self.region(region).alarm_name or f"{self.deployment}-{region}-websocket-health"


# RIDEOUT_REDIS_<REGION>_<FIELD>: one region's Redis, as a container platform sets it.
_REGION_REDIS_ENV = re.compile(
    r"RIDEOUT_REDIS_([A-Z0-9][A-Z0-9_]*?)_(URL|CA_FILE|CERT_FILE|KEY_FILE)"
)
_REGION_REDIS_FIELDS = {"URL": "url", "CA_FILE": "ca_file", "CERT_FILE": "cert_file",
                        "KEY_FILE": "key_file"}  # fmt: skip


def region_env_name(region: str, what: str = "URL") -> str:
    """The variable that sets `region`'s Redis `what` (``RIDEOUT_REDIS_US_EAST_1_URL``)."""
    return f"RIDEOUT_REDIS_{region.upper().replace('-', '_')}_{what}"


def _region_env(env: Mapping[str, str]) -> dict[str, dict[str, tuple[str, str]]]:
    """RIDEOUT_REDIS_<REGION>_<FIELD> variables: {REGION: {field: (value, variable)}}."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    for name, value in env.items():
        match = _REGION_REDIS_ENV.fullmatch(name)
        if match:
            found.setdefault(match[1], {})[_REGION_REDIS_FIELDS[match[2]]] = (value, name)
    return found


def _parse_redis_access(t: _Reader) -> RedisAccessConfig:
    access = RedisAccessConfig(**_scalars(t, RedisAccessConfig()))
    if bool(access.cert_file) != bool(access.key_file):
        raise ConfigError(t.key("cert_file"), "cert_file and key_file go together (mutual TLS)")
    return access


def _redis_url(t: _Reader, name: str, url: str) -> tuple[str, int, bool]:
    """(host, port, tls) of a ``redis://`` or ``rediss://`` URL; ConfigError otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(t.key(name), f"{url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ConfigError(t.key(name), f"{url!r}: expected redis://HOST:PORT or rediss://HOST:PORT")
    if parts.username or parts.password:
        raise ConfigError(
            t.key(name),
            "no credentials in the URL (it shows in `config show` and logs): set "
            "[redis] *_user and *_password_file",
        )
    if parts.path not in ("", "/", "/0") or parts.query:
        raise ConfigError(t.key(name), f"{url!r}: rideout uses database 0 and no options")
    return parts.hostname, port or 6379, parts.scheme == "rediss"


def _parse_region_redis(r: _Reader, access: RedisAccessConfig, mode: str) -> RedisConfig:
    if not r.has("url"):
        redis = RedisConfig(
            address=_address(r, "address", ""), port=r.integer("port", 6379, maximum=65535)
        )
        for name in ("ca_file", "cert_file", "key_file"):
            if r.has(name):
                raise ConfigError(r.key(name), "TLS needs a rediss:// url")
        r.done()
        return redis
    if mode != "external":
        raise ConfigError(r.key("url"), 'is for external mode (mode = "external") only')
    url = r.text("url", "")
    host, port, tls = _redis_url(r, "url", url)
    names = ("ca_file", "cert_file", "key_file")
    own = [name for name in names if r.has(name)]
    files = {name: r.text(name, getattr(access, name), empty_ok=True) for name in names}
    if not tls and any(files[name] for name in own):
        raise ConfigError(r.key(own[0]), "TLS files are set but the URL is redis://: use rediss://")
    if bool(files["cert_file"]) != bool(files["key_file"]):
        raise ConfigError(r.key("cert_file"), "cert_file and key_file go together (mutual TLS)")
    r.done()
    return RedisConfig(
        address=host, port=port, url=url,
        tls=RedisTLS(check_hostname=access.check_hostname, **files) if tls else None,
    )  # fmt: skip


_EXPIRES_IN = re.compile(r"([1-9][0-9]*)(m|h)")


def _parse_evacuate_aws(t: _Reader) -> EvacuateAwsConfig:
    # Its strings may be "" ("not set", as `config show` writes them): read before the rest.
    texts: dict[str, str] = {}
    for f in fields(EvacuateAwsConfig):
        if isinstance(f.default, str) and t.has(f.name):
            value = t.raw(f.name)
            if not isinstance(value, str):
                raise ConfigError(t.key(f.name), f"expected a string, got {_kind(value)}")
            texts[f.name] = value.strip()
    aws = EvacuateAwsConfig(**{**_scalars(t, EvacuateAwsConfig()), **texts})
    if aws.max_attempts > 20:
        raise ConfigError(t.key("max_attempts"), f"must be at most 20, got {aws.max_attempts}")
    if not aws.table:
        raise ConfigError(t.key("table"), "expected a DynamoDB table name")
    found = _EXPIRES_IN.fullmatch(aws.zonal_shift_expires_in)
    if not found or int(found[1]) * (60 if found[2] == "h" else 1) > 72 * 60:
        raise ConfigError(
            t.key("zonal_shift_expires_in"),
            f"expected minutes or hours up to 72h (30m, 12h), got {aws.zonal_shift_expires_in!r}",
        )
    if bool(aws.eks_cluster) != bool(aws.eks_server):
        raise ConfigError(t.key("eks_server"), "eks_cluster and eks_server go together")
    for name in ("endpoint_url", "eks_server"):
        url = getattr(aws, name)
        if url and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
            raise ConfigError(t.key(name), f"expected an http(s):// URL, got {url!r}")
        if url:
            try:
                secure_url(name, url)
            except InvalidArgument as exc:
                raise ConfigError(t.key(name), str(exc).removeprefix(f"{name} ")) from None
    return aws


def _parse_aws(t: _Reader) -> AwsConfig:
    d = AwsConfig()
    regions_table = t.table("regions")
    tags_table = t.table("tags")
    aws = AwsConfig(
        deployment=t.text("deployment", d.deployment),
        hosted_zone_id=t.optional_text("hosted_zone_id"),
        record_type=t.text("record_type", d.record_type),
        alarm_region=t.optional_text("alarm_region"),
        period=t.integer("period", d.period, maximum=86400),
        insufficient_data_health=t.text("insufficient_data_health", d.insufficient_data_health),
        publish_metrics=t.flag("publish_metrics", d.publish_metrics),
        global_datastore=t.optional_text("global_datastore"),
        tags=tuple((k, tags_table.text(k, "")) for k in tags_table.names()),
        regions=tuple(
            _parse_aws_region(regions_table.table(name), name) for name in regions_table.names()
        ),
    )
    t.done()
    if not _NAME.match(aws.deployment):
        raise ConfigError(
            t.key("deployment"), f"expected a name like 'auction-prod', got {aws.deployment!r}"
        )
    if aws.hosted_zone_id and not re.fullmatch(
        r"(/hostedzone/)?[A-Z0-9]{1,32}", aws.hosted_zone_id
    ):
        raise ConfigError(
            t.key("hosted_zone_id"), f"{aws.hosted_zone_id!r} is not a Route 53 hosted zone id"
        )
    if aws.record_type not in ("A", "alias"):
        raise ConfigError(t.key("record_type"), f"must be 'A' or 'alias', got {aws.record_type!r}")
    if aws.alarm_region and not _AWS_REGION.match(aws.alarm_region):
        raise ConfigError(t.key("alarm_region"), f"{aws.alarm_region!r} is not an AWS region name")
    if aws.period not in (10, 30) and aws.period % 60:
        raise ConfigError(
            t.key("period"), f"must be 10, 30 or a multiple of 60 (CloudWatch), got {aws.period}"
        )
    if aws.insufficient_data_health not in ("Healthy", "Unhealthy", "LastKnownStatus"):
        raise ConfigError(
            t.key("insufficient_data_health"),
            f"must be 'Healthy', 'Unhealthy' or 'LastKnownStatus', got {aws.insufficient_data_health!r}",
        )
    if aws.global_datastore and not _AWS_ID.match(aws.global_datastore):
        raise ConfigError(
            t.key("global_datastore"), f"{aws.global_datastore!r} is not an ElastiCache id"
        )
    for key, _ in aws.tags:
        if key.startswith(("aws:", "rideout:")):
            raise ConfigError(f"{t.key('tags')}.{key}", "tag keys aws:* and rideout:* are reserved")
    return aws


def _parse_aws_region(t: _Reader, name: str) -> AwsRegionConfig:
    region = AwsRegionConfig(
        name=name,
        aws_region=t.text("aws_region", name),
        addresses=t.strings("addresses", ()),
        **{
            key: t.optional_text(key)
            for key in (
                "alias_dns_name",
                "alias_hosted_zone_id",
                "alarm_name",
                "replication_group",
                "cache_subnet_group",
            )
        },
    )
    t.done()
    if not _AWS_REGION.match(region.aws_region):
        raise ConfigError(t.key("aws_region"), f"{region.aws_region!r} is not an AWS region name")
    for address in region.addresses:
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            raise ConfigError(t.key("addresses"), f"{address!r} is not an IPv4 address") from None
    for key in ("replication_group", "cache_subnet_group"):
        value = getattr(region, key)
        if value and not _AWS_ID.match(value):
            raise ConfigError(t.key(key), f"{value!r} is not an ElastiCache id")
    return region


def _validate_aws(aws: AwsConfig, regions: tuple[str, ...]) -> None:
    """Check the [aws] section against the names of the deployment's regions."""
    known = set(regions)
    for region in aws.regions:
        if region.name not in known:
            raise ConfigError(
                f"aws.regions.{region.name}", f"no such region (known: {', '.join(sorted(known))})"
            )
    if aws.hosted_zone_id:
        for name in regions:
            mapped = aws.region(name)
            key = f"aws.regions.{name}"
            if aws.record_type == "A" and not mapped.addresses:
                raise ConfigError(
                    f"{key}.addresses", "record_type 'A' needs the region's addresses"
                )
            if aws.record_type == "alias" and not (
                mapped.alias_dns_name and mapped.alias_hosted_zone_id
            ):
                raise ConfigError(
                    f"{key}.alias_dns_name",
                    "record_type 'alias' needs alias_dns_name and alias_hosted_zone_id",
                )
    if aws.global_datastore:
        for name in regions:
            if not aws.region(name).replication_group:
                raise ConfigError(
                    f"aws.regions.{name}.replication_group",
                    "global_datastore needs each region's replication group id",
                )
