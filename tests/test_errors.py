"""One root for every exception (rideout.errors), one base per package (docs/errors.md)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

import rideout
from rideout._process import ProcessError
from rideout.auth import CredentialError, JWKSError
from rideout.auth.admin import AdminTokenError
from rideout.aws.errors import AwsError
from rideout.client.errors import ClientError
from rideout.cluster.errors import ClusterError
from rideout.config import ConfigError
from rideout.controlplane.errors import ControlPlaneError
from rideout.dns import DnsError
from rideout.dns.doh import DohRequestError
from rideout.drill.errors import DrillError
from rideout.errors import InvalidArgument, InvalidArgumentType, RideoutError
from rideout.evacuate import EvacuationError
from rideout.health import MetricError
from rideout.lab import LabError
from rideout.protocol import ProtocolError
from rideout.store import StoreError
from rideout.store.embedded import EmbeddedRedisError
from rideout.store.replication import ReplicationError
from rideout.waitingroom import RoomError

SRC = Path(rideout.__file__).parent
DOC = SRC.parents[1] / "docs" / "errors.md"

# Private exceptions used only as control flow inside their module, never raised to a
# caller: they need not (and should not) be catchable as RideoutError.
CONTROL_FLOW = {
    "rideout.protocol._Invalid": "raised by the field checks, re-raised as ProtocolError",
    "rideout._guard._HeadTooLarge": "raised by the header callbacks, answered with HTTP 431",
    "rideout.cli.room._CommandError": "raised by the room client, turned into the exit status",
}

# The one base of each package (or leaf module) and what it sits beneath.
PACKAGE_BASES: dict[str, type[RideoutError]] = {
    "rideout.config": ConfigError,
    "rideout.protocol": ProtocolError,
    "rideout._process": ProcessError,
    "rideout.store": StoreError,
    "rideout.auth": CredentialError,
    "rideout.client": ClientError,
    "rideout.health": MetricError,
    "rideout.dns": DnsError,
    "rideout.cluster": ClusterError,
    "rideout.controlplane": ControlPlaneError,
    "rideout.drill": DrillError,
    "rideout.lab": LabError,
    "rideout.waitingroom": RoomError,
    "rideout.evacuate": EvacuationError,
    "rideout.aws": AwsError,
}


def module_names() -> list[str]:
    """Every module of the package, from its files: pkgutil.walk_packages would skip a
    directory without ``__init__.py`` and every module in it."""
    names = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        if parts[-1] == "__main__":  # importing it runs the CLI
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def defined_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined at the top level of a rideout module, by full name."""
    found: dict[str, type[BaseException]] = {}
    for name in module_names():
        module: ModuleType = importlib.import_module(name)
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{obj.__qualname__}"] = obj
    return found


EXCEPTIONS = defined_exceptions()


def test_the_walk_finds_every_package() -> None:
    packages = {name.split(".")[1] for name in EXCEPTIONS}
    assert {"store", "auth", "client", "dns", "health", "protocol", "errors"} <= packages
    assert {"cluster", "controlplane", "drill"} <= packages
    assert "rideout.realtime.app" in module_names()


def test_every_exception_derives_from_rideout_error() -> None:
    outside = sorted(
        name
        for name, cls in EXCEPTIONS.items()
        if not issubclass(cls, RideoutError) and name not in CONTROL_FLOW
    )
    assert not outside, f"derive these from RideoutError (or their package's base): {outside}"


def test_each_package_has_one_base() -> None:
    for name, cls in EXCEPTIONS.items():
        if name in CONTROL_FLOW:
            continue
        for package, base in PACKAGE_BASES.items():
            if name == package or name.startswith(package + "."):
                assert issubclass(cls, base), f"{name} is not a {base.__name__}"


def test_the_allow_lists_name_real_classes_that_need_them() -> None:
    for name in CONTROL_FLOW:
        assert name in EXCEPTIONS, f"{name} no longer exists: drop it from CONTROL_FLOW"
        assert name.rsplit(".", 1)[1].startswith("_"), f"{name} is public: it needs the root"


def test_every_public_exception_is_in_the_doc() -> None:
    documented = set(re.findall(r"\b[A-Z]\w*(?:Error|Exception)?\b", DOC.read_text()))
    missing = sorted(
        name
        for name in EXCEPTIONS
        if not name.rsplit(".", 1)[1].startswith("_") and name.rsplit(".", 1)[1] not in documented
    )
    assert not missing, f"list these in docs/errors.md: {missing}"


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (InvalidArgument, ValueError),
        (InvalidArgumentType, ValueError),
        (InvalidArgumentType, TypeError),
        (ConfigError, ValueError),
        (ProtocolError, ValueError),
        (ProcessError, RuntimeError),
        (ReplicationError, RuntimeError),
        (EmbeddedRedisError, RuntimeError),
        (JWKSError, ValueError),
        (AdminTokenError, RuntimeError),
        (MetricError, ValueError),
        (DohRequestError, ValueError),
    ],
)
def test_builtin_bases_that_callers_catch_are_kept(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, builtin)


def test_the_root_is_not_a_builtin_category() -> None:
    assert RideoutError.__bases__ == (Exception,)
    assert not issubclass(RideoutError, ValueError | RuntimeError | TypeError)
    assert issubclass(InvalidArgumentType, InvalidArgument)
    assert not issubclass(InvalidArgument, TypeError)
