"""The synchronous failover client: :class:`RetryState` driven over ``httpx.Client``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from rideout.backoff import RetryBudget
from rideout.client.http._deadline import _deadline_transport, _Deadlines, _tightener
from rideout.client.http._driver import _ClientBase, _message, _timeouts
from rideout.client.http._errors import Attempt
from rideout.client.http._metrics import ClientMetrics, RetryRateAlarm
from rideout.client.http._policy import DomainPlan, RetryPolicy, _HeadersIn, classify
from rideout.client.http._state import Action, Done, RetryState, Send, Sleep

__all__ = ["FailoverClient"]


class FailoverClient(_ClientBase):
    """Synchronous failover client on ``httpx.Client``.

    Requests take a path (``client.get("/v1/items")``) that is joined to each
    attempt's domain. Returns the ``httpx.Response`` of the first attempt that is not
    retryable (a 2xx, a 4xx, ...); raises :class:`AllAttemptsFailed` otherwise. Pass
    ``transport`` (an httpx transport) or a ready ``client`` (not closed by this
    object). ``clock`` and ``sleep`` are injectable (tests record the delays instead of
    sleeping). Thread-safe as far as ``httpx.Client`` is.
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
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
        trust_env: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
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
        self._deadlines = _Deadlines()
        if client is None and transport is None:
            transport = _deadline_transport(trust_env, self._deadlines)
        self._client = (
            client
            if client is not None
            else httpx.Client(
                headers=headers,
                transport=transport,
                trust_env=trust_env,
                timeout=self.policy.attempt_timeout,
            )
        )
        self._sleep = sleep

    def __enter__(self) -> FailoverClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying ``httpx.Client`` if this object made it."""
        if self._owns_client:
            self._client.close()

    def request(
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
        """Send ``method path`` through the domain plan; see the class docstring."""
        verb = method.upper()
        merged = self._headers(verb, headers, idempotency_key)
        state = self._retry_state(verb, path, merged)
        action = state.start()
        while True:
            if isinstance(action, Send):
                action = self._attempt(state, action, verb, merged, params, content, data, json)
            elif isinstance(action, Done):
                return action.response
            elif isinstance(action, Sleep):
                self._sleep(action.seconds)
                action = state.slept()
            else:
                raise action.error

    def _attempt(
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
        """Make the attempt ``send`` asks for; the state's next step."""
        seconds = send.timeout
        timeouts = _timeouts(seconds)
        extensions: dict[str, Any] = {"timeout": timeouts}
        if send.tight:
            extensions["trace"] = _tightener(self._clock, timeouts, seconds)
        client = self._client
        self._deadlines.at = time.monotonic() + seconds
        try:
            request = client.build_request(
                method,
                send.url,
                params=params,
                headers=headers,
                content=content,
                data=data,
                json=json,
                extensions=extensions,
            )
            response = client.send(request)
        except httpx.HTTPError as exc:
            return state.finished(classify(exc), error=_message(exc))
        finally:
            self._deadlines.at = None
        return state.finished(
            response.status_code, response=response, response_headers=response.headers
        )

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("GET", path, ...)``."""
        return self.request("GET", path, **kwargs)

    def head(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("HEAD", path, ...)``."""
        return self.request("HEAD", path, **kwargs)

    def options(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("OPTIONS", path, ...)``."""
        return self.request("OPTIONS", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("POST", path, ...)``."""
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("PUT", path, ...)``."""
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("PATCH", path, ...)``."""
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> httpx.Response:
        """``request("DELETE", path, ...)``."""
        return self.request("DELETE", path, **kwargs)
