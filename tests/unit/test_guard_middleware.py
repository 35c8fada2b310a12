"""The guard's time-to-first-byte limit (memroute.server.middleware), unit-level over tiny ASGI apps: a response
that has not started within ``request_timeout_s`` is given up with a 504 in memroute's error shape; one that
started in time runs to its end however long it takes; a request cancelled from outside stays cancelled; and
the app's own errors pass through. (The server-level behaviour — headers, 413 — is tested over a socket in
tests/server.)"""

from __future__ import annotations

import asyncio
import json

import pytest

from memroute.config.settings import ServerSettings
from memroute.server.middleware import GuardMiddleware

SCOPE = {"type": "http", "method": "GET", "path": "/api/memory", "headers": [(b"host", b"127.0.0.1")],
         "scheme": "http"}


def _guard(app, timeout: float = 0.1) -> GuardMiddleware:
    return GuardMiddleware(app, ServerSettings(request_timeout_s=timeout, allowed_hosts=()))


async def _receive():
    return {"type": "http.request", "body": b"", "more_body": False}


def _run(guard: GuardMiddleware) -> list[dict]:
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    asyncio.run(guard(dict(SCOPE), _receive, send))
    return sent


def test_no_response_in_time_is_a_504_and_the_app_is_cancelled():
    cancelled = []

    async def slow(scope, receive, send):
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    sent = _run(_guard(slow))
    assert sent[0]["status"] == 504 and cancelled == [True]
    assert dict(sent[0]["headers"])[b"x-content-type-options"] == b"nosniff"
    assert json.loads(sent[1]["body"]) == {"error": {"message": "no response within 0.1s", "details": []}}


def test_an_app_that_swallows_the_cancellation_still_gets_a_504():
    async def stubborn(scope, receive, send):
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return  # ends without a response

    assert _run(_guard(stubborn))[0]["status"] == 504


def test_a_response_started_in_time_runs_to_its_end():
    async def streaming(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(0.3)  # three times the limit, after the first byte
        await send({"type": "http.response.body", "body": b"done", "more_body": False})

    sent = _run(_guard(streaming))
    assert sent[0]["status"] == 200 and sent[-1]["body"] == b"done"


def test_a_fast_app_leaves_no_timer_behind_and_its_errors_pass_through():
    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def fast(scope, receive, send):
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        async def broken(scope, receive, send):
            raise RuntimeError("a bug")

        async def send(message):
            pass

        await _guard(fast, timeout=30)(dict(SCOPE), _receive, send)
        assert not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError, match="a bug"):
            await _guard(broken, timeout=30)(dict(SCOPE), _receive, send)

    asyncio.run(main())


def test_a_request_cancelled_from_outside_stays_cancelled():
    async def main() -> None:
        started = asyncio.Event()

        async def waiting(scope, receive, send):
            started.set()
            await asyncio.sleep(5)

        sent: list[dict] = []

        async def send(message):
            sent.append(message)

        request = asyncio.ensure_future(_guard(waiting, timeout=30)(dict(SCOPE), _receive, send))
        await started.wait()
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        assert sent == []  # no 504 for a request nobody waits for

    asyncio.run(main())


def test_the_app_runs_in_the_requests_own_task():
    """No second task: the route's work starts in the loop iteration the request starts in, which the fair queue
    (memroute.server.fair_queue) counts on, and its time limit still cancels it."""
    seen = []

    async def app(scope, receive, send):
        seen.append(asyncio.current_task())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def main() -> bool:
        async def send(message):
            pass

        await _guard(app)(dict(SCOPE), _receive, send)
        return seen == [asyncio.current_task()]

    assert asyncio.run(main())


def test_a_request_given_up_for_time_leaves_its_task_uncancelled():
    async def slow(scope, receive, send):
        await asyncio.sleep(5)

    async def main() -> tuple[int, int]:
        sent: list[dict] = []

        async def send(message):
            sent.append(message)

        await _guard(slow)(dict(SCOPE), _receive, send)
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(0)  # the task goes on normally after the 504
        return sent[0]["status"], task.cancelling()

    assert asyncio.run(main()) == (504, 0)
