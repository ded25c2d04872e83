"""Reading a request body within its limit: refused (413) past it, before it is all read.
Bodies are parsed on a thread, except those small enough to decode faster than the hop."""
from __future__ import annotations

from starlette.requests import Request

from engine.inbound.refusals import Refused

INLINE_PARSE_BYTES = 16 * 1024


async def read_body(request: Request, limit: int) -> bytes:
    """The body of ``request``; :class:`Refused` (413) over ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"the body is {int(declared)} bytes, over this service's "
                           f"max_body_bytes {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"the body is over this service's max_body_bytes {limit}")
        chunks.append(chunk)
    return b"".join(chunks)
