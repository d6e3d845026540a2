"""The asynchronous failover client: :class:`RetryState` driven over ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from rideout.backoff import RetryBudget
from rideout.client.http._driver import _ClientBase, _message, _timeouts
from rideout.client.http._errors import Attempt, ErrorKind
from rideout.client.http._metrics import ClientMetrics, RetryRateAlarm
from rideout.client.http._policy import DomainPlan, RetryPolicy, _HeadersIn, classify
from rideout.client.http._state import Action, Done, RetryState, Send, Sleep
from rideout.client.resolve import ResolutionError, Resolver

__all__ = ["AsyncFailoverClient"]


class AsyncFailoverClient(_ClientBase):
    """Asynchronous failover client on ``httpx.AsyncClient``; same API as :class:`FailoverClient`.

    Each attempt is cancelled at its bound (``min(attempt_timeout, time left)``), so
    the deadline holds whatever the server does. With ``resolver`` (see
    :mod:`rideout.client.resolve`) the client resolves each domain's name itself,
    connects to the address it got (rotating through the answer on repeated attempts
    to one domain) and sends the original ``Host`` (and TLS SNI); a resolution failure
    is an attempt with outcome ``dns_error``. Runs on asyncio.
    """

    def __init__(
        self,
        plan: DomainPlan,
        geo: str,
        *,
        policy: RetryPolicy | None = None,
        budget: RetryBudget | None = None,
        metrics: ClientMetrics | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
        alarm: RetryRateAlarm | None = None,
        headers: _HeadersIn | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        client: httpx.AsyncClient | None = None,
        resolver: Resolver | None = None,
        trust_env: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            plan,
            geo,
            policy=policy if policy is not None else RetryPolicy(),
            budget=budget,
            metrics=metrics,
            on_attempt=on_attempt,
            alarm=alarm,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._owns_client = client is None
        self._client = (
            client
            if client is not None
            else httpx.AsyncClient(
                headers=headers,
                transport=transport,
                trust_env=trust_env,
                timeout=self.policy.attempt_timeout,
            )
        )
        self._sleep = sleep
        self.resolver = resolver

    async def __aenter__(self) -> AsyncFailoverClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the underlying ``httpx.AsyncClient`` if this object made it."""
        if self._owns_client:
            await self._client.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        headers: _HeadersIn | None = None,
        content: bytes | str | None = None,
        data: Mapping[str, Any] | None = None,
        json: Any = None,
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        """Send ``method path`` through the domain plan; see :class:`FailoverClient`."""
        verb = method.upper()
        merged = self._headers(verb, headers, idempotency_key)
        state = self._retry_state(verb, path, merged)
        action = state.start()
        while True:
            if isinstance(action, Send):
                action = await self._attempt(
                    state, action, verb, merged, params, content, data, json
                )
            elif isinstance(action, Done):
                return action.response
            elif isinstance(action, Sleep):
                await self._sleep(action.seconds)
                action = state.slept()
            else:
                raise action.error

    async def _attempt(
        self,
        state: RetryState[httpx.Response],
        send: Send,
        method: str,
        headers: httpx.Headers | None,
        params: Any,
        content: bytes | str | None,
        data: Mapping[str, Any] | None,
        json: Any,
    ) -> Action[httpx.Response]:
        """Make the attempt ``send`` asks for, cancelled at its bound; the state's next step."""
        seconds = send.timeout
        address: str | None = None
        resolving = self.resolver is not None
        try:
            async with asyncio.timeout(seconds):
                if resolving:
                    url, headers, extensions, address = await self._target(send, headers)
                    resolving = False
                else:  # no resolver: no coroutine to call (this is the hot path)
                    url, extensions = send.url, {}
                extensions["timeout"] = _timeouts(seconds)
                request = self._client.build_request(
                    method,
                    url,
                    params=params,
                    headers=headers,
                    content=content,
                    data=data,
                    json=json,
                    extensions=extensions,
                )
                response = await self._client.send(request)
        except ResolutionError as exc:
            return state.finished(ErrorKind.DNS_ERROR, error=str(exc), address=address)
        except httpx.HTTPError as exc:
            return state.finished(classify(exc), error=_message(exc), address=address)
        except TimeoutError:
            if resolving:
                error = f"name resolution took over {seconds:.3g} s"
                return state.finished(ErrorKind.DNS_ERROR, error=error)
            error = f"no complete response within {seconds:.3g} s"
            return state.finished(ErrorKind.TIMEOUT, error=error, address=address)
        return state.finished(
            response.status_code,
            response=response,
            response_headers=response.headers,
            address=address,
        )

    async def _target(
        self, send: Send, headers: httpx.Headers | None
    ) -> tuple[str, httpx.Headers | None, dict[str, Any], str | None]:
        """The URL to connect to, the headers (with the original Host), extensions and
        the address used (called only with a resolver)."""
        assert self.resolver is not None
        url = httpx.URL(send.url)
        host = url.host
        if _is_ip(host):
            return send.url, headers, {}, None
        resolved = await self.resolver.resolve(host)
        # Repeated attempts on one domain walk through its addresses.
        repeats = sum(1 for d in self._targets[: send.number] if d == send.domain)
        address = resolved.addresses[repeats % len(resolved.addresses)]
        with_host = headers.copy() if headers is not None else httpx.Headers()
        with_host["Host"] = host if url.port is None else f"{host}:{url.port}"
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        return str(url.copy_with(host=address)), with_host, extensions, address

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("GET", path, ...)``."""
        return await self.request("GET", path, **kwargs)

    async def head(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("HEAD", path, ...)``."""
        return await self.request("HEAD", path, **kwargs)

    async def options(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("OPTIONS", path, ...)``."""
        return await self.request("OPTIONS", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("POST", path, ...)``."""
        return await self.request("POST", path, **kwargs)

    async def put(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("PUT", path, ...)``."""
        return await self.request("PUT", path, **kwargs)

    async def patch(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("PATCH", path, ...)``."""
        return await self.request("PATCH", path, **kwargs)

    async def delete(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("DELETE", path, ...)``."""
        return await self.request("DELETE", path, **kwargs)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
