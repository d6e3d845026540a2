"""Ask a running control plane for a one-time dashboard login link.

The caller proves it may by sending the admin token, read from the keys directory (so
only the deployment's own user can): the token crosses loopback in a request header,
and is never sent back.
"""

from __future__ import annotations

import httpx

from rideout import _http, routes
from rideout.auth.admin import ADMIN_TOKEN_FILENAME, AdminTokenError, load_or_create_admin_token
from rideout.config import Config
from rideout.controlplane.errors import ControlPlaneError

__all__ = ["LoginLinkError", "request_login_link"]


class LoginLinkError(ControlPlaneError):
    """No login link: the control plane is not running, or refused; the message says why."""


async def request_login_link(config: Config, *, timeout: float = 5.0) -> str:
    """A fresh login link for the dashboard of the deployment `config` describes."""
    url = routes.control_plane_url(config, routes.LOGIN_CODES)
    if not (config.keys_dir / ADMIN_TOKEN_FILENAME).exists():
        raise LoginLinkError(f"no admin token in {config.keys_dir}: is rideout up?")
    try:
        token = load_or_create_admin_token(config.keys_dir)
    except AdminTokenError as exc:
        raise LoginLinkError(str(exc)) from exc
    try:
        async with _http.async_client(timeout=timeout) as http:
            response = await http.post(url, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise LoginLinkError(
            f"no control plane answers at {url} ({type(exc).__name__}): is rideout up?"
        ) from exc
    try:
        body = response.json()
        if response.status_code == 200:
            return str(body["url"])
        problem = body.get("message", body.get("error"))
    except (ValueError, KeyError, TypeError, AttributeError):
        problem = response.text[:200]
    raise LoginLinkError(
        f"the control plane refused a login link: HTTP {response.status_code} {problem}"
    )
