"""The end user of an MCP session over HTTP: named once, when the session is opened, and fixed for its life.

An app key (``--end-users``) opens its ``/mcp`` session with an ``x-memroute-user`` header; the server remembers
the end user for the session id it hands out (``mcp-session-id``), and every later request of the session acts
for that end user, whether it repeats the header or not. A later request naming **another** end user is refused
(400) before it reaches the SDK, so one session can never be switched to a second end user's memories. The end
user travels to the tools in a context variable (:func:`current_end_user`), as the SDK's verified key does.
"""

from __future__ import annotations

import contextvars
from collections import OrderedDict
from typing import Final

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memroute.errors import ValidationError
from memroute.tenancy import require_end_user

__all__ = ["MAX_SESSIONS", "EndUserSessions", "current_end_user"]

END_USER_HEADER: Final = b"x-memroute-user"
SESSION_HEADER: Final = b"mcp-session-id"
MAX_SESSIONS: Final = 100_000
"""Sessions whose end user is remembered; the oldest is forgotten first (its next request must name it again)."""

_end_user: contextvars.ContextVar[str | None] = contextvars.ContextVar("memroute_mcp_end_user", default=None)


def current_end_user() -> str | None:
    """The end user of the MCP session serving this request (``None`` when none was named)."""
    return _end_user.get()


class EndUserSessions:
    """ASGI middleware in front of the SDK's ``/mcp`` app that binds each session to its end user."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._sessions: OrderedDict[str, str] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        named = headers.get(END_USER_HEADER, b"").decode("latin-1").strip() or None
        session = headers.get(SESSION_HEADER, b"").decode("latin-1") or None
        try:
            if named is not None:
                require_end_user(named, "x-memroute-user")
            bound = self._sessions.get(session) if session else None
            if bound is not None and named is not None and named != bound:
                raise ValidationError(f"x-memroute-user: this MCP session acts for end user {bound!r}; open a new "
                                      "session for another end user", [("x-memroute-user", "fixed per session")])
        except ValidationError as exc:
            await JSONResponse({"error": "invalid_request", "error_description": str(exc)}, status_code=400)(
                scope, receive, send)
            return
        end_user = bound if bound is not None else named
        if session and bound is None and named is not None:
            self._bind(session, named)  # a session opened without one: the first end user named is its own
        if scope.get("method") == "DELETE" and session:
            self._sessions.pop(session, None)

        async def remember(message: Message) -> None:
            if message["type"] == "http.response.start" and end_user is not None and session is None:
                opened = dict(message.get("headers") or ()).get(SESSION_HEADER)
                if opened:
                    self._bind(opened.decode("latin-1"), end_user)
            await send(message)

        token = _end_user.set(end_user)
        try:
            await self.app(scope, receive, remember)
        finally:
            _end_user.reset(token)

    def _bind(self, session: str, end_user: str) -> None:
        self._sessions[session] = end_user
        self._sessions.move_to_end(session)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
