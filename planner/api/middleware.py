"""ASGI middleware of the service: the optional API key, and one structured access-log line per request.

Both are plain ASGI (no request bodies are read or logged): the key is checked before the app sees the
request, and the log line is written when the response starts, with the request id it answers under.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from planner.api.problems import problem_response

ACCESS_LOGGER = "planner.access"
#: paths that stay open with an API key set: the spec and the docs pages built from it
OPEN_PATHS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
#: an incoming X-Request-ID is echoed only when it looks like an id (never a log-injection vector)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

access_logger = logging.getLogger(ACCESS_LOGGER)


class ApiKeyGate:
    """401 ``application/problem+json`` for a request under the API without the configured key."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._key = api_key.encode()

    def _presented(self, headers: Headers) -> bytes:
        key = headers.get("x-api-key")
        if key is None:
            auth = headers.get("authorization", "")
            if auth[:7].lower() == "bearer ":
                key = auth[7:].strip()
        return (key or "").encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "") in OPEN_PATHS or scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)
            return
        if hmac.compare_digest(self._presented(Headers(scope=scope)), self._key):
            await self.app(scope, receive, send)
            return
        response = problem_response(
            status=401, slug="unauthorized", title="Unauthorized",
            detail="this service needs an API key: send it in the X-API-Key header (or Authorization: Bearer)",
            instance=scope.get("path", ""), headers={"WWW-Authenticate": 'ApiKey header="X-API-Key"'},
        )
        await response(scope, receive, send)


class AccessLog:
    """One JSON line per request on the ``planner.access`` logger: method, path, status, duration, sizes,
    client address and request id (also answered as ``X-Request-ID``). Never the body or the query."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        headers = Headers(scope=scope)
        incoming = headers.get("x-request-id", "")
        request_id = incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex
        state = {"status": 500, "bytes_out": 0}

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                MutableHeaders(scope=message)["X-Request-ID"] = request_id
            elif message["type"] == "http.response.body":
                state["bytes_out"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_logged)
        finally:
            if access_logger.isEnabledFor(logging.INFO):
                self._log(scope, headers, request_id, state, start)

    @staticmethod
    def _log(scope: Scope, headers: Headers, request_id: str, state: dict[str, int], start: float) -> None:
        client = scope.get("client")
        declared = headers.get("content-length")
        access_logger.info(json.dumps({
            "request_id": request_id,
            "method": scope.get("method"),
            "path": scope.get("path"),
            "status": state["status"],
            "duration_s": round(time.perf_counter() - start, 6),
            "bytes_in": int(declared) if declared and declared.isdigit() else None,
            "bytes_out": state["bytes_out"],
            "client": client[0] if client else None,
        }, separators=(",", ":")))
