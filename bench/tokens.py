"""Access-token rates per core: rideout's issuer and verifier against bare PyJWT.

    .venv/bin/python -m bench.tokens [--seconds S]

The waiting room hands every admitted visitor a signed token and every app server
verifies one per WebSocket handshake, so these rates size a surge (docs/capacity.md).
Alternating rounds of rideout's ``TokenIssuer.issue`` / ``TokenVerifier.verify`` and of
``jwt.encode`` / ``jwt.decode`` with the same Ed25519 key (loaded once) and the same
claims; each row is the median of the rounds, on one core (one process, no threads).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rich.console import Console
from rich.table import Table

from rideout.auth.keys import JWKSet, SigningKey
from rideout.auth.resume import ResumeKey, ResumeKeyRing, ResumeTickets
from rideout.auth.tokens import TokenIssuer, TokenVerifier
from rideout.drill.machine import cpu_rate as rate

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
ISSUER, AUDIENCE = "https://auth.rideout.test", "rideout"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    private = Ed25519PrivateKey.generate()  # one key for both sides
    key = SigningKey(private)
    issuer = TokenIssuer(key, ISSUER, AUDIENCE, 3600)
    verifier = TokenVerifier(JWKSet(key.jwks()), ISSUER, AUDIENCE)
    public = private.public_key()
    token = issuer.issue("visitor-123456")

    def bare_issue() -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "visitor-123456", "iat": now,
                  "nbf": now, "exp": now + 3600, "jti": "x" * 22}  # fmt: skip
        return jwt.encode(claims, private, algorithm="EdDSA", headers={"kid": key.kid})

    bare_token = bare_issue()

    def bare_verify() -> object:
        return jwt.decode(
            bare_token, public, algorithms=["EdDSA"], audience=AUDIENCE, issuer=ISSUER
        )

    # A resumption ticket (rideout.auth.resume): what a reconnect presents instead.
    tickets = ResumeTickets(ResumeKeyRing(ResumeKey.generate()), 300.0)
    ticket = tickets.mint(verifier.verify(token))
    assert ticket is not None

    rows: dict[str, list[float]] = {
        k: [] for k in ("issue", "bare issue", "verify", "bare verify", "ticket verify")
    }
    for i in range(args.rounds):
        pairs = [("issue", lambda: issuer.issue("visitor-123456")), ("bare issue", bare_issue),
                 ("verify", lambda: verifier.verify(token)), ("bare verify", bare_verify),
                 ("ticket verify", lambda: tickets.verify(ticket.value))]  # fmt: skip
        if i % 2:
            pairs.reverse()
        for name, work in pairs:
            rows[name].append(rate(work, args.seconds))
    table = Table(title=f"tokens per core (median of {args.rounds} alternating rounds)")
    for column in ("operation", "rideout /s", "bare PyJWT /s", "ratio", "rideout µs each"):
        table.add_column(column, justify="right")
    for op in ("issue", "verify"):
        ours, bare = statistics.median(rows[op]), statistics.median(rows[f"bare {op}"])
        table.add_row(op, f"{ours:,.0f}", f"{bare:,.0f}", f"{ours / bare:.2f}", f"{1e6 / ours:.0f}")
    ours = statistics.median(rows["ticket verify"])
    verify = statistics.median(rows["verify"])
    table.add_row("verify a resumption ticket", f"{ours:,.0f}", "", f"{ours / verify:.1f}× verify",
                  f"{1e6 / ours:.1f}")  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
