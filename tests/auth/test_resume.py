"""Resumption tickets: minting, verifying, rotation, expiry, their key files, and
that nothing but the key's holder can make one that verifies."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rideout.auth import AuthError, Claims
from rideout.auth.resume import (
    TICKET_PREFIX,
    ResumeKey,
    ResumeKeyError,
    ResumeKeyRing,
    ResumeTickets,
    is_ticket,
    load_resume_keys,
    resume_key_path,
)
from rideout.auth.revocation import RevocationList, revoke_subject, revoke_token
from rideout.protocol import MAX_TICKET_LENGTH
from tests.conftest import FakeClock, examples

HYPOTHESIS = settings(
    database=None,
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
TTL = 300.0
KEY = ResumeKey(b"k" * 32)
OTHER = ResumeKey(b"o" * 32)


def token_claims(now: float, *, sub: str = "alice", life: float = 3600.0) -> Claims:
    iat = int(now) - 10
    return Claims(sub, iat + life, iat, "jti-1", MappingProxyType({}))


def tickets(clock: FakeClock, ring: ResumeKeyRing | None = None, **kw: float) -> ResumeTickets:
    return ResumeTickets(ring or ResumeKeyRing(KEY), TTL, clock=clock, **kw)


def refused(tickets: ResumeTickets, ticket: str) -> tuple[int, str]:
    with pytest.raises(AuthError) as caught:
        tickets.verify(ticket)
    assert ticket not in caught.value.message  # never echoed
    return caught.value.status, caught.value.reason


def minted(clock: FakeClock, **kw: object) -> str:
    ticket = tickets(clock).mint(token_claims(clock.now), **kw)  # type: ignore[arg-type]
    assert ticket is not None
    return ticket.value


# ------------------------------------------------------------------------ happy path


def test_a_ticket_restates_its_tokens_identity_for_a_few_minutes() -> None:
    clock = FakeClock(1_000_000.0)
    claims = token_claims(clock.now)
    ticket = tickets(clock).mint(claims, {"rideout_demo": True})
    assert ticket is not None
    assert is_ticket(ticket.value) and ticket.value.startswith(TICKET_PREFIX)  # noqa: PT018
    assert len(ticket.value) <= MAX_TICKET_LENGTH
    assert (ticket.expires, ticket.ttl) == (1_000_300, 300.0)
    back = tickets(clock).verify(ticket.value)
    # The token's dates, not the ticket's: a resumed connection lives as long as the token.
    assert (back.sub, back.jti, back.iat, back.exp) == ("alice", "jti-1", claims.iat, claims.exp)
    assert back.raw["rideout_demo"] is True
    clock.now += TTL - 1
    assert tickets(clock).verify(ticket.value).sub == "alice"


def test_a_ticket_never_outlives_its_token() -> None:
    clock = FakeClock(1_000_000.0)
    claims = token_claims(clock.now, life=70)  # expires 60 s from now
    ticket = tickets(clock).mint(claims)
    assert ticket is not None
    assert ticket.expires == int(claims.exp) and ticket.ttl == 60.0  # noqa: PT018
    clock.now = claims.exp + 5  # past the token, and the leeway
    assert refused(tickets(clock), ticket.value) == (401, "token_expired")
    assert tickets(clock).mint(claims) is None  # nothing left to resume


def test_expired_tickets_are_refused_after_the_leeway() -> None:
    clock = FakeClock(1_000_000.0)
    ticket = minted(clock)
    clock.now += TTL + 4.9
    assert tickets(clock).verify(ticket).sub == "alice"  # within the 5 s leeway
    clock.now += 0.1
    assert refused(tickets(clock), ticket) == (401, "token_expired")


def test_a_ticket_living_longer_than_this_servers_ttl_is_refused() -> None:
    clock = FakeClock(1_000_000.0)
    long = ResumeTickets(ResumeKeyRing(KEY), 3600.0, clock=clock).mint(token_claims(clock.now))
    assert long is not None
    assert refused(tickets(clock), long.value) == (401, "lifetime_too_long")


# --------------------------------------------------------------------------- rotation


def test_rotation_accepts_the_current_and_the_previous_key_only() -> None:
    clock = FakeClock(1_000_000.0)
    old = tickets(clock, ResumeKeyRing(OTHER)).mint(token_claims(clock.now))
    assert old is not None
    rotated = tickets(clock, ResumeKeyRing(KEY, OTHER))
    assert rotated.verify(old.value).sub == "alice"  # minted before the rotation
    new = rotated.mint(token_claims(clock.now))
    assert new is not None and f".{KEY.kid}." in new.value  # noqa: PT018  # minted with the new key
    assert tickets(clock, ResumeKeyRing(KEY)).verify(new.value).sub == "alice"
    # Once the previous key is dropped, its tickets fall back to the token.
    assert refused(tickets(clock, ResumeKeyRing(KEY)), old.value) == (401, "unknown_kid")


def test_a_key_id_names_its_key_and_never_shows_the_secret() -> None:
    assert KEY.kid != OTHER.kid and len(KEY.kid) == 11  # noqa: PT018
    assert "kkkk" not in repr(KEY)
    with pytest.raises(ValueError, match="at least 32"):
        ResumeKey(b"short")


# -------------------------------------------------------------------------- revocation


def test_a_tickets_identity_is_matched_against_the_revocation_list_as_its_tokens() -> None:
    clock = FakeClock(1_000_000.0)
    back = tickets(clock).verify(minted(clock))
    revocations = RevocationList(leeway=5.0, clock=clock)
    assert revocations.match(back.sub, back.jti, back.iat) is None
    revocations.replace([revoke_token("jti-1", now=clock.now, max_ttl=86400, leeway=5)])
    assert revocations.match(back.sub, back.jti, back.iat) is not None
    revocations.replace([revoke_subject("alice", now=clock.now, max_ttl=86400, leeway=5)])
    assert revocations.match(back.sub, back.jti, back.iat) is not None


# ---------------------------------------------------------------------- refusals, forgery


def _parts(ticket: str) -> list[str]:
    return ticket.split(".")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_tampered_and_malformed_tickets_get_a_tokens_401() -> None:
    clock = FakeClock(1_000_000.0)
    verifier = tickets(clock)
    good = minted(clock)
    prefix, kid, payload, mac = _parts(good)
    body = json.loads(base64.urlsafe_b64decode(payload + "=="))
    forged = _b64(json.dumps(body | {"sub": "mallory"}, separators=(",", ":")).encode())
    assert refused(verifier, f"{prefix}.{kid}.{forged}.{mac}") == (401, "bad_signature")
    flipped = mac[:-2] + ("A" if mac[-2] != "A" else "B") + mac[-1]
    assert refused(verifier, f"{prefix}.{kid}.{payload}.{flipped}") == (401, "bad_signature")
    assert refused(verifier, f"{prefix}.{OTHER.kid}.{payload}.{mac}") == (401, "unknown_kid")
    assert refused(verifier, f"rt2.{kid}.{payload}.{mac}") == (401, "malformed")
    assert refused(verifier, "rt1.") == (401, "malformed")
    assert refused(verifier, good + "x" * MAX_TICKET_LENGTH) == (401, "malformed")
    # Signed with the key but not rideout's shape: refused after the MAC, still a 401.
    for bad in ({"sub": ""}, {"iat": "x"}, {"carry": {"sub": "x"}}, {"more": 1}):
        text = _b64(json.dumps(body | bad).encode())
        signed = f"rt1.{KEY.kid}.{text}"
        assert refused(verifier, f"{signed}.{KEY.mac(signed.encode())}") == (401, "malformed")
    outliving = _b64(json.dumps(body | {"exp": body["tex"] + 1}).encode())
    signed = f"rt1.{KEY.kid}.{outliving}"
    assert refused(verifier, f"{signed}.{KEY.mac(signed.encode())}") == (401, "lifetime_too_long")


@HYPOTHESIS
@given(data=st.data())
def test_no_mutation_of_a_ticket_verifies(data: st.DataObject) -> None:
    clock = FakeClock(1_000_000.0)
    good = minted(clock)
    position = data.draw(st.integers(0, len(good) - 1))
    kind = data.draw(st.sampled_from(["replace", "delete", "insert"]))
    char = data.draw(st.characters(codec="ascii"))
    if kind == "replace":
        mutated = good[:position] + char + good[position + 1 :]
    elif kind == "delete":
        mutated = good[:position] + good[position + 1 :]
    else:
        mutated = good[:position] + char + good[position:]
    if mutated == good:
        return
    with pytest.raises(AuthError) as caught:
        tickets(clock).verify(mutated)
    assert caught.value.status == 401


@HYPOTHESIS
@given(
    sub=st.text(min_size=1, max_size=40).filter(str.isprintable),
    exp=st.integers(1_000_001, 1_000_300),
    secret=st.binary(min_size=32, max_size=64),
    carry=st.dictionaries(st.sampled_from(["rideout_demo", "x"]), st.booleans(), max_size=2),
)
def test_tickets_made_without_the_key_never_verify(
    sub: str, exp: int, secret: bytes, carry: dict[str, bool]
) -> None:
    """Anyone may write a well-formed ticket, under any key id; only the key verifies."""
    clock = FakeClock(1_000_000.0)
    forger = ResumeKey(secret)
    if forger.secret == KEY.secret:
        return
    body = {"sub": sub, "jti": "j", "iat": 999_000, "tex": 1_000_400, "exp": exp, "carry": carry}
    payload = _b64(json.dumps(body).encode())
    for kid in (KEY.kid, forger.kid):
        signed = f"rt1.{kid}.{payload}"
        with pytest.raises(AuthError):
            tickets(clock).verify(f"{signed}.{forger.mac(signed.encode())}")


# ------------------------------------------------------------------------------ files


def test_the_key_file_is_made_once_private_and_kept(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    assert load_resume_keys(keys, create=False) is None  # external mode, not made yet
    ring = load_resume_keys(keys, create=True)
    assert ring is not None and ring.previous is None  # noqa: PT018
    assert load_resume_keys(keys, create=False) == ring
    path = resume_key_path(keys)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_rotating_the_file_keeps_the_previous_key(tmp_path: Path) -> None:
    first = load_resume_keys(tmp_path, create=True)
    assert first is not None
    path = resume_key_path(tmp_path)
    path.rename(path.with_name(path.name + ".previous"))
    ring = load_resume_keys(tmp_path, create=True)
    assert ring is not None
    assert ring.previous == first.current
    assert ring.current != first.current


def test_a_bad_key_file_is_an_error_never_replaced(tmp_path: Path) -> None:
    resume_key_path(tmp_path).write_bytes(b"short")
    with pytest.raises(ResumeKeyError, match="too short"):
        load_resume_keys(tmp_path, create=True)
    assert resume_key_path(tmp_path).read_bytes() == b"short"
