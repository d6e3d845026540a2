"""Schemathesis fuzzes every REST operation of a live zone and a live control plane from
the documents they serve: schema-valid and schema-invalid requests, the private and
admin routes with the admin token. No answer may be a 5xx, have a status, media type,
header or body the document does not give it, or succeed without the credential the
document asks for (Schemathesis's ``ignored_auth`` sends the request again without it);
and no request that changes state succeeds without its credential.

Bounded: :func:`tests.conftest.examples` examples per operation (``./dev test --quick``
runs a fifth), and at most :data:`SECONDS` of requests per operation. What it found is
fixed, each with a plain regression test beside the code it fixed (docs/openapi.md).
Schemathesis's pytest plugin is not loaded (``-p no:schemathesis``: it would cost every
test process its import); its strategies run under Hypothesis's own ``@given``."""

from __future__ import annotations

import json
import time
from typing import Any, Final

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode, checks

from rideout import routes
from rideout.auth.canary_keys import load_canary_keys
from rideout.auth.request_signing import RequestSigner
from rideout.openapi.control_plane import control_plane_document
from rideout.openapi.room import room_fragment
from rideout.realtime.app import zone_document
from tests.conftest import EXAMPLES_SCALE, examples
from tests.openapi.conftest import Live, operations

SECONDS: Final = 2.0 * max(1.0, EXAMPLES_SCALE)
"""Requests stop after this long on one operation (Hypothesis then finishes its run);
longer where RIDEOUT_TEST_EXAMPLES asks for more examples (a deeper run by hand)."""
EXAMPLES: Final = 12

SKIPPED: Final = {
    ("GET", routes.STREAM): "an endless server-sent event stream: its 403 and 503 are "
    "tested in tests/controlplane/test_stream.py",
}


class _Room:
    def openapi(self) -> dict[str, Any]:
        return room_fragment(["auction"])


ZONE: Final = zone_document([_Room()])
CONTROL_PLANE: Final = control_plane_document()
SURFACES: Final = {"zone": ZONE, "control-plane": CONTROL_PLANE}


def not_a_crash(ctx: Any, response: Any, case: Any) -> None:
    """No 500, ever. (Schemathesis's ``not_a_server_error`` refuses every 5xx; a
    documented 503, from a store that cannot be reached or a zone that drains, or the
    control plane's 501 without a supervisor, is an answer, and ``status_code_conformance``
    refuses any 5xx the document does not give.)"""
    assert response.status_code != 500, f"500 from {case.operation.label}: {response.text[:500]}"


CHECKS: Final = [
    not_a_crash,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.ignored_auth,
]
# Not `negative_data_rejection`: it counts a query parameter the operation does not name
# as invalid (`?event_id=00&=null`), which the servers ignore, as AWS's do (a client's
# cache-busting `?_=...` must not be refused).

_STATE_CHANGING: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _cases(secured_only: bool = False) -> list[Any]:
    out = []
    for surface, document in SURFACES.items():
        for method, path in operations(document):
            operation = document["paths"][path][method.lower()]
            if (method, path) in SKIPPED:
                continue
            if secured_only and not (operation["security"] and method in _STATE_CHANGING):
                continue
            out.append(pytest.param(surface, method, path, id=f"{surface} {method} {path}"))
    return out


@pytest.fixture(scope="module")
def schemas(live: Live) -> dict[str, Any]:
    """Each surface's document as its server serves it, loaded by Schemathesis."""
    return {
        "zone": schemathesis.openapi.from_url(live.zone + routes.OPENAPI),
        "control-plane": schemathesis.openapi.from_url(live.control_plane + routes.OPENAPI),
    }


def _base(live: Live, surface: str) -> str:
    return live.zone if surface == "zone" else live.control_plane


def _admin(live: Live, document: dict[str, Any], method: str, path: str) -> dict[str, str]:
    security = document["paths"][path][method.lower()]["security"]
    return live.admin if any("adminToken" in r for r in security) else {}


def _strategy(operation: Any, *modes: GenerationMode) -> st.SearchStrategy[Any]:
    return st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in modes))


_SETTINGS: Final = settings(
    max_examples=examples(EXAMPLES),
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize(("surface", "method", "path"), _cases())
def test_every_operation_answers_as_documented(
    live: Live, schemas: dict[str, Any], surface: str, method: str, path: str
) -> None:
    operation = schemas[surface][path][method]
    headers = _admin(live, SURFACES[surface], method, path)
    base = _base(live, surface)
    modes = [GenerationMode.POSITIVE]
    if operation.path_parameters or operation.query or operation.body or operation.headers:
        modes.append(GenerationMode.NEGATIVE)
    stop = time.monotonic() + SECONDS
    session = requests.Session()

    @_SETTINGS
    @given(case=_strategy(operation, *modes))
    def fuzz(case: Any) -> None:
        if time.monotonic() > stop:
            return
        response = case.call(
            base_url=base, session=session, headers=headers, timeout=10, allow_redirects=False
        )
        case.validate_response(response, checks=CHECKS, headers=headers)

    with session:
        fuzz()


@pytest.mark.parametrize(("surface", "method", "path"), _cases(secured_only=True))
def test_no_state_changes_without_its_credential(
    live: Live, schemas: dict[str, Any], surface: str, method: str, path: str
) -> None:
    operation = schemas[surface][path][method]
    base = _base(live, surface)
    wrong = {"Authorization": "Bearer " + "x" * 43}
    stop = time.monotonic() + SECONDS
    session = requests.Session()

    @_SETTINGS
    @given(
        case=_strategy(operation, GenerationMode.POSITIVE), credential=st.sampled_from([{}, wrong])
    )
    def refused(case: Any, credential: dict[str, str]) -> None:
        if time.monotonic() > stop:
            return
        case.headers = {
            k: v
            for k, v in (case.headers or {}).items()
            if k.lower() not in ("authorization", "cookie", "x-rideout-signature")
        }
        response = case.call(
            base_url=base, session=session, headers=credential, timeout=10, allow_redirects=False
        )
        assert not 200 <= response.status_code < 300, (
            f"{method} {path} succeeded without its credential: {response.status_code} "
            f"{response.text[:300]}"
        )
        assert response.status_code != 500, response.text[:300]

    with session:
        refused()


def _security(document: dict[str, Any], label: str) -> list[dict[str, list[str]]]:
    method, path = label.split(" ", 1)
    security: list[dict[str, list[str]]] = document["paths"][path][method.lower()]["security"]
    return security


def test_signed_datapoints_answer_as_documented(live: Live, schemas: dict[str, Any]) -> None:
    """The canaries' ingest, past its signature: bodies from the document, signed with
    the region's canary key (half of them about the signer's region and a zone of it),
    so the fuzzer reaches the datapoints' parsing and not only the 401."""
    operation = schemas["control-plane"][routes.METRICS_INGEST]["POST"]
    region = live.config.primary.name
    zone = live.config.primary.zones[0].name
    signer = RequestSigner(region, load_canary_keys(live.config.keys_dir, [region])[region][0])
    url = live.control_plane + routes.METRICS_INGEST
    own = [{"Name": "ApiId", "Value": region}, {"Name": "Zone", "Value": zone}]
    stop = time.monotonic() + SECONDS
    session = requests.Session()

    @_SETTINGS
    @given(case=_strategy(operation, GenerationMode.POSITIVE), ours=st.booleans())
    def fuzz(case: Any, ours: bool) -> None:
        if time.monotonic() > stop:
            return
        if ours:
            for datapoint in case.body.get("MetricData", []):
                datapoint["Dimensions"] = own
        body = json.dumps(case.body).encode()
        headers = {"Content-Type": "application/json",
                   **signer.headers("POST", routes.METRICS_INGEST, body)}  # fmt: skip
        response = session.post(url, data=body, headers=headers, timeout=10)
        assert response.status_code != 401, response.text  # the signature holds
        # Not ignored_auth: it takes the case's own generated signature for the one sent.
        case.validate_response(response, checks=[c for c in CHECKS if c is not checks.ignored_auth])

    with session:
        fuzz()
