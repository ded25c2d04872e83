"""Undoing a response's ``Content-Encoding`` within the attempt's deadline (docs/retries.md rule 1,
docs/security.md: "decompression counts against the attempt's deadline").

The deadline bounds every socket read, but a small compressed body can take seconds of CPU
to inflate: ``Content-Encoding: gzip, gzip`` turns 17 KB into 10 GiB. :class:`BodyDecoder`
undoes the codings (``gzip``/``x-gzip``, ``deflate``, ``identity``; several in a row) one
bounded step at a time — each step of each layer yields at most :data:`STEP_BYTES` — and
calls ``check`` before every step, which raises once the deadline has passed; what it
yields is counted against ``max_response_bytes`` by the reader. The innermost layer with
input always goes first, so no layer holds more than a step of its outer layer's output.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

from urllib3.exceptions import DecodeError

from engine.errors import ResponseRejected

__all__ = ["MAX_CODINGS", "STEP_BYTES", "BodyDecoder"]

STEP_BYTES = 64 * 1024  # most bytes one step of one layer yields
MAX_CODINGS = 5  # codings in one Content-Encoding, as urllib3 allows
_GZIP = ("gzip", "x-gzip")
_OURS = (*_GZIP, "deflate")


class _Inflate:
    """One ``gzip`` (concatenated members allowed, trailing garbage after one ignored, as
    urllib3 does) or ``deflate`` (zlib-wrapped, else raw, as urllib3 does) coding."""

    def __init__(self, coding: str) -> None:
        self.gzip = coding in _GZIP
        self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS if self.gzip else zlib.MAX_WBITS)
        self._first: bytes | None = b""  # deflate: the input so far, until it decodes
        self._members = 0  # gzip members ended
        self.pending = b""  # input not yet consumed
        self.more = False  # the last step filled its output: zlib may hold more
        self.done = False  # the stream ended: what follows is ignored

    def put(self, data: bytes) -> None:
        if not self.done:
            self.pending += data

    @property
    def active(self) -> bool:
        return not self.done and (bool(self.pending) or self.more)

    def step(self, limit: int) -> bytes:
        data, self.pending = self.pending, b""
        try:
            out = self._obj.decompress(data, limit)
        except zlib.error as exc:
            return self._on_error(exc, data, limit)
        if self._first is not None and (out or self._obj.eof):
            self._first = None
        elif self._first is not None:
            self._first += data
        if self._obj.eof:  # all of it is out; what follows is in unused_data only
            self.more = False
            self._next_member()
        else:
            self.pending, self.more = self._obj.unconsumed_tail, len(out) >= limit
        return out

    def _on_error(self, exc: zlib.error, data: bytes, limit: int) -> bytes:
        if not self.gzip and self._first is not None:  # not zlib-wrapped: raw deflate
            seen, self._first = self._first + data, None
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
            self.pending = seen
            return self.step(limit)
        if self.gzip and self._members:  # garbage after a complete member
            self.done, self.pending, self.more = True, b"", False
            return b""
        raise DecodeError(f"the response's content could not be decoded: {exc}") from exc

    def _next_member(self) -> None:
        """After the end of a stream: gzip may go on with another member (what follows now,
        or in a later read), deflate ends."""
        if self.gzip:
            self._members += 1
            self.pending = self._obj.unused_data
            self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
        else:
            self.done, self.pending = True, b""


class BodyDecoder:
    """Decodes a body coded with ``codings`` (in the order they were applied), step by
    step; ``check()`` is called before every step (it raises when time is up)."""

    def __init__(self, codings: list[str], check: Callable[[], object]) -> None:
        self._layers = [_Inflate(c) for c in reversed(codings) if c != "identity"]
        self._check = check

    @classmethod
    def for_header(cls, content_encoding: str, check: Callable[[], object]
                   ) -> BodyDecoder | None:
        """The decoder of a ``Content-Encoding`` value; None when a coding is not one of
        ours (``br``, ``zstd``, unknown): urllib3 decodes those, or leaves them, as before.
        More than :data:`MAX_CODINGS` codings are refused: the server answered, with a
        response refused for safety (:class:`~engine.errors.ResponseRejected`), not a broken
        connection."""
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        if len(codings) > MAX_CODINGS:
            raise ResponseRejected(f"response refused: {len(codings)} content codings in its "
                                   f"Content-Encoding, more than the {MAX_CODINGS} decoded")
        if not all(c in _OURS or c == "identity" for c in codings):
            return None
        return cls(codings, check)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes ``data`` (more of the coded body) gives, in pieces."""
        if not self._layers:
            if data:
                yield data
            return
        self._layers[0].put(data)
        yield from self._run()

    def _run(self) -> Iterator[bytes]:
        layers, last = self._layers, len(self._layers) - 1
        while True:
            inner = next((i for i in range(last, -1, -1) if layers[i].active), None)
            if inner is None:
                return
            self._check()
            out = layers[inner].step(STEP_BYTES)
            if not out:
                continue
            if inner < last:
                layers[inner + 1].put(out)
            else:
                yield out
