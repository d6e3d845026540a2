"""The sans-I/O RetryState, driven through its public protocol (no sockets)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rideout.backoff import FixedSchedule, RetryBudget
from rideout.client import (
    AllAttemptsFailed,
    Attempt,
    ErrorKind,
    GiveUpReason,
    RetryBudgetExhausted,
    RetryPolicy,
    RetryState,
)
from rideout.client.http import Done, Fail, Send, Sleep
from tests.conftest import FakeClock, examples

# ================================================================= sans-I/O RetryState

TARGETS = ("http://a", "http://b", "http://c", "http://d", "http://d")


def drive(
    state: RetryState[str],
    outcomes: list[Any],
    clock: FakeClock,
    durations: list[float] | None = None,
) -> tuple[list[Any], Any]:
    """Run the state against scripted outcomes; the actions seen and the final one."""
    actions: list[Any] = []
    action = state.start()
    durations = list(durations or [])
    while not isinstance(action, Done | Fail):
        actions.append(action)
        if isinstance(action, Sleep):
            clock.sleep(action.seconds)
            action = state.slept()
        else:
            clock.advance(min(durations.pop(0), action.timeout) if durations else 0.0)
            outcome = outcomes.pop(0)
            response = f"response {outcome}" if isinstance(outcome, int) else None
            action = state.finished(outcome, response=response)
    return actions, action


def test_state_walks_the_default_schedule(clock: FakeClock) -> None:
    state: RetryState[str] = RetryState(RetryPolicy(), TARGETS, "GET", "/v1/items", clock=clock)
    actions, final = drive(state, [503, ErrorKind.CONNECT_ERROR, 502, 500, 504], clock)
    sends = [a for a in actions if isinstance(a, Send)]
    assert [s.url for s in sends] == [t + "/v1/items" for t in TARGETS]
    assert [a.seconds for a in actions if isinstance(a, Sleep)] == [1, 3, 6, 10]
    assert isinstance(final, Fail)
    assert final.error.reason is GiveUpReason.ATTEMPTS
    assert final.error.last_response == "response 504"
    assert [a.outcome for a in final.error.attempts] == [503, "connect_error", 502, 500, 504]
    assert [a.started - 1000 for a in final.error.attempts] == [0, 1, 4, 10, 20]


def test_state_returns_the_first_non_retryable_response(clock: FakeClock) -> None:
    state: RetryState[str] = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock)
    _actions, final = drive(state, [503, 404], clock)
    assert final == Done("response 404")
    assert len(state.attempts) == 2


def test_state_keeps_the_attempt_of_a_first_time_success(clock: FakeClock) -> None:
    # Without an on_attempt hook, a success's Attempt is built only when asked for.
    state: RetryState[str] = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock)
    actions, final = drive(state, [200], clock, durations=[0.25])
    assert actions == [Send(0, "http://a", "http://a/x", 10.0, False)]
    assert final == Done("response 200")
    assert state.attempts == (Attempt("http://a", 0, 1000.0, 0.25, 200),)
    assert state.attempts[0] is state.attempts[0]
    assert state.remaining() == 59.75


def test_state_never_passes_the_deadline(clock: FakeClock) -> None:
    # Attempts that each hang for their whole timeout (4 s): 0-4, sleep 1, 5-9,
    # sleep 3, 12-15 (only 3 s left), then the 6 s sleep would pass 15 s: give up.
    policy = RetryPolicy(attempt_timeout=4.0, total_timeout=15.0)
    state: RetryState[str] = RetryState(policy, TARGETS, "GET", "/x", clock=clock)
    actions, final = drive(state, [ErrorKind.READ_TIMEOUT] * 5, clock, durations=[99] * 5)
    assert [a.timeout for a in actions if isinstance(a, Send)] == [4.0, 4.0, 3.0]
    assert isinstance(final, Fail)
    assert final.error.reason is GiveUpReason.DEADLINE
    assert clock.now - 1000 == 15.0


@settings(max_examples=examples(200), deadline=None)
@given(
    delays=st.lists(st.floats(0, 5), min_size=1, max_size=8),
    durations=st.lists(st.floats(0, 10), min_size=8, max_size=8),
    attempt_timeout=st.floats(0.01, 10),
    total_timeout=st.floats(0.01, 30),
)
def test_state_deadline_property(
    delays: list[float], durations: list[float], attempt_timeout: float, total_timeout: float
) -> None:
    clock = FakeClock()
    policy = RetryPolicy(
        schedule=FixedSchedule(tuple(delays)),
        attempt_timeout=attempt_timeout,
        total_timeout=total_timeout,
    )
    state: RetryState[str] = RetryState(
        policy, ["http://a"] * len(delays), "GET", "/x", clock=clock
    )
    actions, final = drive(state, [503] * len(delays), clock, durations=durations)
    assert clock.now - 1000 <= total_timeout + 1e-9
    assert sum(isinstance(a, Send) for a in actions) <= len(delays)
    assert isinstance(final, Fail)


def test_state_budget(clock: FakeClock) -> None:
    budget = RetryBudget(capacity=10, retry_cost=5, timeout_cost=10)
    state: RetryState[str] = RetryState(
        RetryPolicy(), TARGETS, "GET", "/x", clock=clock, budget=budget
    )
    _, final = drive(state, [503, 503, 503], clock)
    assert isinstance(final, Fail)
    assert isinstance(final.error, RetryBudgetExhausted)
    assert len(final.error.attempts) == 3
    assert budget.available == 0
    refunded = RetryBudget()
    state = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock, budget=refunded)
    _, final = drive(state, [ErrorKind.READ_TIMEOUT, 200], clock)
    assert final == Done("response 200")
    assert refunded.available == 500 - 10 + 1  # a timeout's retry, then a success's refund
    state = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock, budget=refunded)
    drive(state, [404], clock)
    assert refunded.available == 492  # a 4xx is a success for the budget too
    full = RetryBudget(capacity=10)
    state = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock, budget=full)
    drive(state, [200], clock)
    assert full.available == full.capacity == 10


def test_state_misuse_is_refused(clock: FakeClock) -> None:
    state: RetryState[str] = RetryState(RetryPolicy(), TARGETS, "GET", "/x", clock=clock)
    with pytest.raises(RuntimeError, match="without a Send"):
        state.finished(200)
    state.start()
    with pytest.raises(RuntimeError, match="twice"):
        state.start()
    with pytest.raises(ValueError, match="a domain for each"):
        RetryState(RetryPolicy(), TARGETS[:2], "GET", "/x")
    with pytest.raises(ValueError, match="path must start"):
        RetryState(RetryPolicy(), TARGETS, "GET", "x", clock=clock).start()


# ===================================================== a transport of your own


class ScriptedTransport:
    """A stand-in for someone's own transport: each call answers the next scripted
    outcome (an HTTP status or an exception) after ``took`` seconds of the fake clock."""

    class Timeout(Exception):
        pass

    def __init__(self, clock: FakeClock, script: list[int | Exception], took: float = 0.25):
        self.clock = clock
        self.script = script
        self.took = took
        self.calls: list[tuple[str, float]] = []

    def get(self, url: str, timeout: float) -> tuple[int, dict[str, str]]:
        self.calls.append((url, timeout))
        self.clock.advance(min(self.took, timeout))
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer, {"content-type": "text/plain"}


def fetch(state: RetryState[tuple[int, dict[str, str]]], transport: ScriptedTransport) -> Any:
    """The loop of docs/clients.md ("Driving RetryState yourself"), on the fake transport:
    only start(), slept(), finished() and the public fields of the steps."""
    action = state.start()
    while True:
        match action:
            case Send(url=url, timeout=timeout):
                try:
                    response = transport.get(url, timeout)
                except ScriptedTransport.Timeout as exc:
                    action = state.finished(ErrorKind.READ_TIMEOUT, error=str(exc))
                else:
                    status, headers = response
                    action = state.finished(status, response=response, response_headers=headers)
            case Sleep(seconds=seconds):
                transport.clock.sleep(seconds)
                action = state.slept()
            case Done(response=response):
                return response
            case Fail(error=error):
                raise error


def test_a_transport_of_your_own_fails_over_then_succeeds(clock: FakeClock) -> None:
    # Send -> failure -> Sleep -> Send -> Done.
    transport = ScriptedTransport(clock, [ScriptedTransport.Timeout("no answer"), 200])
    state: RetryState[tuple[int, dict[str, str]]] = RetryState(
        RetryPolicy(), TARGETS, "GET", "/v1/items", clock=clock
    )
    assert fetch(state, transport) == (200, {"content-type": "text/plain"})
    assert transport.calls == [("http://a/v1/items", 10.0), ("http://b/v1/items", 10.0)]
    assert clock.sleeps == [1]
    assert [(a.domain, a.outcome, a.error) for a in state.attempts] == [
        ("http://a", ErrorKind.READ_TIMEOUT, "no answer"),
        ("http://b", 200, ""),
    ]
    assert [a.started - 1000 for a in state.attempts] == [0.0, 1.25]


def test_a_transport_of_your_own_gives_up(clock: FakeClock) -> None:
    # Send -> failure -> Sleep -> Send -> failure -> Fail, with the last response kept.
    policy = RetryPolicy(schedule=FixedSchedule((0, 2)))
    transport = ScriptedTransport(clock, [ScriptedTransport.Timeout("no answer"), 503])
    state: RetryState[tuple[int, dict[str, str]]] = RetryState(
        policy, TARGETS, "GET", "/v1/items", clock=clock
    )
    with pytest.raises(AllAttemptsFailed) as info:
        fetch(state, transport)
    assert info.value.reason is GiveUpReason.ATTEMPTS
    assert [a.outcome for a in info.value.attempts] == [ErrorKind.READ_TIMEOUT, 503]
    assert info.value.last_response == (503, {"content-type": "text/plain"})
    assert clock.sleeps == [2]
    with pytest.raises(RuntimeError, match="no attempt is due"):
        state.slept()  # over: the state answers nothing more


def test_steps_are_values() -> None:
    send = Send(0, "http://a", "http://a/x", 10.0, False)
    assert send == Send(0, "http://a", "http://a/x", 10.0, False)
    assert hash(send) == hash(Send(0, "http://a", "http://a/x", 10.0, False))
    assert send != Send(1, "http://a", "http://a/x", 10.0, False)
    assert (
        repr(send)
        == "Send(number=0, domain='http://a', url='http://a/x', timeout=10.0, tight=False)"
    )
    assert Sleep(1.0) == Sleep(1.0)
    assert Sleep(1.0) != Done(1.0)
    match send:
        case Send(number, domain, url, timeout, tight):
            assert (number, domain, url, timeout, tight) == (
                0,
                "http://a",
                "http://a/x",
                10.0,
                False,
            )
    with pytest.raises(AttributeError):
        send.extra = 1  # type: ignore[attr-defined]
