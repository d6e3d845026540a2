"""The secrets directory's Redis part (rideout.store.tls_files): made once, kept after,
every file 0600, a new host added under the same CA, an unfit file named with its fix;
and the ACL file it writes is local mode's own, which every server of the matrix loads."""

from __future__ import annotations

import datetime
import shutil
import stat
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from cryptography import x509
from redis.exceptions import AuthenticationError, NoPermissionError

from rideout.store.acl import (
    ACL_FILENAME,
    FUNCTIONS_ACL_FILENAME,
    SERVER_CONFIG_FILENAME,
    RedisRole,
    ServerAuth,
    acl_file_text,
    credentials_dir,
    load_credentials,
    load_or_create_users,
    password_file,
    server_config_text,
)
from rideout.store.embedded import EmbeddedRedis, RedisSpec, server_info
from rideout.store.pki import LEAF_VALIDITY, RedisHost, load_certificate, subject_alt_names
from rideout.store.tls_files import (
    FileOutcome,
    TlsFiles,
    TlsMaterialError,
    ensure_redis_secrets,
    ensure_redis_users,
    ensure_tls,
)
from tests.conftest import free_port

NOW = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.UTC)
EAST = RedisHost("east", ("10.0.1.5", "redis.use1.internal"))
WEST = RedisHost("west", ("10.1.1.5",))


def _states(outcomes: list[FileOutcome], root: Path) -> dict[str, str]:
    return {str(o.path.relative_to(root)): o.state for o in outcomes}


def _contents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_everything_is_made_once_then_kept(tmp_path: Path) -> None:
    made = ensure_redis_secrets(tmp_path, [EAST, WEST], NOW)
    assert made.problems == []
    assert _states(made.files, tmp_path) == {
        **{f"redis/{role.value}.password": "made" for role in RedisRole},
        "redis/users-functions.acl": "made",
        "redis/users.acl": "made",
        "redis/server.conf": "made",
        **{f"redis/tls/{n}": "made" for n in ("ca.key", "ca.pem", "client.key", "client.pem",
                                              "server-east.key", "server-east.pem",
                                              "server-west.key", "server-west.pem")},
    }  # fmt: skip
    # Every file private; the directories too.
    for path in tmp_path.rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    before = _contents(tmp_path)

    again = ensure_redis_secrets(tmp_path, [EAST, WEST], NOW + datetime.timedelta(days=1))
    assert again.problems == []
    assert set(_states(again.files, tmp_path).values()) == {"kept"}
    assert _contents(tmp_path) == before
    assert [(s.name, s.addresses) for s in again.servers] == [
        ("east", ("10.0.1.5", "redis.use1.internal")), ("west", ("10.1.1.5",)),
    ]  # fmt: skip
    assert again.servers[0].valid_until == NOW + LEAF_VALIDITY


def test_a_new_host_is_added_under_the_same_ca(tmp_path: Path) -> None:
    ensure_tls(tmp_path, [EAST], NOW)
    before = _contents(tmp_path)
    added = ensure_tls(tmp_path, [WEST], NOW)  # east not named again: kept, still listed
    assert added.problems == []
    after = _contents(tmp_path)
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) == {"redis/tls/server-west.key", "redis/tls/server-west.pem"}
    ca = load_certificate(after["redis/tls/ca.pem"])
    west = load_certificate(after["redis/tls/server-west.pem"])
    west.verify_directly_issued_by(ca)
    assert subject_alt_names(west) == ["10.1.1.5"]
    assert [s.name for s in added.servers] == ["west", "east"]


def test_no_host_no_tls(tmp_path: Path) -> None:
    assert ensure_tls(tmp_path, [], NOW).files == []
    assert not (tmp_path / "redis" / "tls").exists()


def test_an_unfit_certificate_is_kept_and_named_with_its_fix(tmp_path: Path) -> None:
    ensure_tls(tmp_path, [EAST], NOW)
    before = _contents(tmp_path)
    wider = RedisHost("east", ("10.0.1.5", "10.0.1.6"))
    found = ensure_tls(tmp_path, [wider], NOW)
    cert = tmp_path / "redis/tls/server-east.pem"
    assert found.problems == [
        f"{cert}: it does not name 10.0.1.6; remove server-east.pem to issue a new one for "
        "its key (or server-east.key too, for a new key)"
    ]
    assert _contents(tmp_path) == before
    # Following the advice: a new certificate for the same key.
    cert.unlink()
    mended = ensure_tls(tmp_path, [wider], NOW)
    assert mended.problems == []
    assert _states(mended.files, tmp_path)["redis/tls/server-east.pem"] == "made"
    assert _contents(tmp_path)["redis/tls/server-east.key"] == before["redis/tls/server-east.key"]
    assert subject_alt_names(load_certificate(cert.read_bytes())) == ["10.0.1.5", "10.0.1.6"]


def test_a_certificate_without_its_key_or_ca_is_not_trusted(tmp_path: Path) -> None:
    tls = TlsFiles.of(tmp_path)
    ensure_tls(tmp_path, [EAST], NOW)
    tls.server("east")[1].unlink()
    found = ensure_tls(tmp_path, [EAST], NOW)
    assert found.problems == [
        f"{tls.server('east')[0]}: its key server-east.key is missing; remove "
        "server-east.pem and server-east.key to make a new pair"
    ]
    assert not tls.server("east")[1].exists()  # nothing made in its place
    # A CA whose key is gone can sign nothing: what it would have made is not made.
    tls.ca[1].unlink()
    tls.server("east")[0].unlink()
    found = ensure_tls(tmp_path, [EAST, WEST], NOW)
    assert f"{tls.ca[0]}: its key ca.key is missing" in found.problems[0]
    assert f"{tls.server('west')[0]}: missing, and no usable CA to issue it" not in found.problems
    assert not tls.server("west")[0].exists()
    assert not tls.server("west")[1].exists()
    # A certificate signed by another CA is named.
    other = tmp_path / "other"
    ensure_tls(other, [EAST], NOW)
    shutil.rmtree(tls.directory)  # as the CA's own problem says, for a new CA
    ensure_tls(tmp_path, [], NOW)  # nothing asked, nothing there: nothing made
    assert not tls.ca[0].exists()
    new_ca = ensure_tls(tmp_path, [WEST], NOW)
    assert new_ca.problems == []
    (tls.directory / "server-east.pem").write_bytes(
        TlsFiles.of(other).server("east")[0].read_bytes()
    )
    (tls.directory / "server-east.key").write_bytes(
        TlsFiles.of(other).server("east")[1].read_bytes()
    )
    found = ensure_tls(tmp_path, [WEST], NOW)
    assert found.problems == [
        f"{tls.server('east')[0]}: it was not signed by this CA (CN=rideout Redis CA); "
        "remove server-east.pem to issue a new one for its key (or server-east.key too, "
        "for a new key)"
    ]


def test_a_missing_ca_certificate_is_made_again_for_its_key(tmp_path: Path) -> None:
    tls = TlsFiles.of(tmp_path)
    ensure_tls(tmp_path, [EAST], NOW)
    old_ca = load_certificate(tls.ca[0].read_bytes())
    tls.ca[0].unlink()
    again = ensure_tls(tmp_path, [EAST], NOW)
    assert again.problems == []  # the server certificate verifies against the new one
    new_ca = load_certificate(tls.ca[0].read_bytes())
    assert new_ca.public_key() == old_ca.public_key()
    assert new_ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_an_unwritable_directory_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "redis").write_text("a file where the directory should be")
    with pytest.raises(TlsMaterialError, match=str(tmp_path / "redis")):
        ensure_redis_secrets(tmp_path, [EAST], NOW)


def test_the_acl_files_are_local_modes_own(tmp_path: Path) -> None:
    ensure_redis_users(tmp_path)
    users = load_or_create_users(tmp_path)
    directory = credentials_dir(tmp_path)
    assert (directory / FUNCTIONS_ACL_FILENAME).read_text() == acl_file_text(users, functions=True)
    assert (directory / ACL_FILENAME).read_text() == acl_file_text(users, functions=False)
    assert (directory / SERVER_CONFIG_FILENAME).read_text() == server_config_text(users.replication)
    # A file rideout's rules no longer match is written anew, and said so.
    (directory / ACL_FILENAME).write_text("user default on nopass ~* +@all\n")
    outcomes = _states(ensure_redis_users(tmp_path), tmp_path)
    assert outcomes["redis/users.acl"] == "rewritten"
    assert outcomes["redis/app.password"] == "kept"
    assert (directory / ACL_FILENAME).read_text() == acl_file_text(users, functions=False)


async def test_a_real_server_loads_the_acl_file(tmp_path: Path, matrix_server: Path) -> None:
    """Each server of the matrix starts with the files as made (its own ACL file), lets
    each user in with its password and holds it to its rules; no one else gets in."""
    ensure_redis_secrets(tmp_path / "secrets", [EAST], NOW)
    directory = credentials_dir(tmp_path / "secrets")
    monitor = load_credentials(tmp_path / "secrets", RedisRole.MONITOR)
    auth = ServerAuth(directory / ACL_FILENAME, directory / SERVER_CONFIG_FILENAME, monitor,
                      directory / FUNCTIONS_ACL_FILENAME)  # fmt: skip
    address = "127.0.1.100"
    spec = RedisSpec("secrets-init", address, free_port(address), tmp_path / "data",
                     tmp_path / "redis.log", auth=auth)  # fmt: skip
    (tmp_path / "data").mkdir()
    async with EmbeddedRedis(spec, binary=matrix_server):
        for role in (RedisRole.APP, RedisRole.CONTROLLER, RedisRole.MONITOR):
            user = load_credentials(tmp_path / "secrets", role)
            client = aioredis.Redis(host=address, port=spec.port, username=user.username,
                                    password=user.password, decode_responses=True)  # fmt: skip
            try:
                assert await client.ping()
                if role == RedisRole.MONITOR:
                    with pytest.raises(NoPermissionError):
                        await client.set("rideout:epoch", 9)
                if role == RedisRole.APP and server_info(matrix_server).key_permissions:
                    with pytest.raises(NoPermissionError):  # 7.0+'s file: read-only epoch
                        await client.set("rideout:epoch", 9)
            finally:
                await client.aclose()
        nobody = aioredis.Redis(host=address, port=spec.port, protocol=2)  # no HELLO first
        try:
            with pytest.raises(AuthenticationError, match=r"NOAUTH|Authentication required"):
                await nobody.ping()
            with pytest.raises(AuthenticationError):
                await nobody.execute_command("AUTH", "default", "")
        finally:
            await nobody.aclose()
    assert password_file(tmp_path / "secrets", RedisRole.APP).exists()
