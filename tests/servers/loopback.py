"""The HTTP server class every loopback fake in ``tests/servers`` runs on.

A client that gives up mid-response (a timeout test, a retry, a CLI that exits on the first error) leaves the
handler thread with a broken pipe. The stdlib server prints that as a traceback on stderr, where tests that
assert "no traceback reaches the user" read it as the product's. A disconnect is not an error of the fake, so
it is dropped here; every other handler exception is still printed.
"""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any

_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class LoopbackHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with daemon handler threads that is silent about client disconnects."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], _DISCONNECTS):
            super().handle_error(request, client_address)
