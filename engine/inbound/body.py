"""Reading a request body within its limit: refused (413) past it, before it is all read.

A body is parsed (JSON, XML) off the event loop, which every caller of the inbound server
shares: on a thread (:func:`engine.serving.threads.to_thread`). Only a body of at most
:data:`INLINE_PARSE_BYTES` may be parsed on the loop itself: JSON that small decodes in
well under a millisecond, less than the hop to a thread and back costs.
"""
from __future__ import annotations

from starlette.requests import Request

from engine.inbound.refusals import Refused

INLINE_PARSE_BYTES = 16 * 1024  # bytes: a JSON body this small is decoded on the event loop


async def read_body(request: Request, limit: int) -> bytes:
    """The body of ``request``; :class:`Refused` (413) when it is over ``limit`` bytes,
    by its Content-Length or as it arrives."""
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
