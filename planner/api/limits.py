"""Request-size limits: a whole body over 1 MiB is refused with a 413 problem before it is parsed."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from planner.api.problems import problem_response
from planner.units import BYTES_PER_KIB, BYTES_PER_MIB

#: largest request body accepted [bytes]
MAX_BODY_BYTES = BYTES_PER_MIB
#: largest inline Hugging Face ``config.json`` accepted, as compact JSON [bytes]
MAX_INLINE_CONFIG_BYTES = 256 * BYTES_PER_KIB


def _too_large_detail(limit_bytes: int) -> str:
    return f"Request body exceeds the limit of {limit_bytes} bytes"


class BodySizeLimit:
    """ASGI middleware refusing bodies over ``max_body_bytes``.

    A declared ``Content-Length`` over the limit is answered at once; a streamed (chunked) body is
    counted as it is read and the read fails with a 413 ``HTTPException`` as soon as it passes the
    limit, which the problem handlers turn into ``application/problem+json``.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES,
                 path_limits: Mapping[str, int] | None = None) -> None:
        """``path_limits``: larger (or smaller) limits of some paths (the batch what-if)."""
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.path_limits = dict(path_limits or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope.get("path", ""), self.max_body_bytes)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            response = problem_response(
                status=413,
                slug="request-too-large",
                title="Content Too Large",
                detail=_too_large_detail(limit),
                instance=scope.get("path", ""),
                extra={"limit_bytes": limit, "size_bytes": int(declared)},
            )
            await response(scope, receive, send)
            return

        received_bytes = 0

        async def counting_receive() -> Message:
            nonlocal received_bytes
            message = await receive()
            if message["type"] == "http.request":
                received_bytes += len(message.get("body", b""))
                if received_bytes > limit:
                    raise HTTPException(413, detail=_too_large_detail(limit))
            return message

        await self.app(scope, counting_receive, send)
