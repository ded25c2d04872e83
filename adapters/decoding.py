"""Undoing a response's ``Content-Encoding`` within the attempt's deadline (docs/security.md).

A small body can inflate for seconds (``gzip, gzip``: 17 KB to 10 GiB), so :class:`BodyDecoder`
works in bounded steps, calling ``check`` before each; the innermost layer with input goes
first, so no layer holds more than one step of its outer layer's output.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

from urllib3.exceptions import DecodeError

from engine.errors import ResponseRejected

__all__ = ["MAX_CODINGS", "STEP_BYTES", "BodyDecoder"]

STEP_BYTES = 64 * 1024
MAX_CODINGS = 5  # codings in one Content-Encoding, as urllib3 allows
_GZIP = ("gzip", "x-gzip")
_OURS = (*_GZIP, "deflate")


class _Inflate:
    """One ``gzip`` or ``deflate`` coding, with urllib3's leniency."""

    def __init__(self, coding: str) -> None:
        self.gzip = coding in _GZIP
        self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS if self.gzip else zlib.MAX_WBITS)
        self._first: bytes | None = b""
        self._members = 0
        self.pending = b""
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
        """After the end of a stream: gzip may go on with another member, deflate ends."""
        if self.gzip:
            self._members += 1
            self.pending = self._obj.unused_data
            self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
        else:
            self.done, self.pending = True, b""


class BodyDecoder:
    """Decodes a body coded with ``codings`` step by step, calling ``check()`` before each."""

    def __init__(self, codings: list[str], check: Callable[[], object]) -> None:
        self._layers = [_Inflate(c) for c in reversed(codings) if c != "identity"]
        self._check = check

    @classmethod
    def for_header(cls, content_encoding: str, check: Callable[[], object]
                   ) -> BodyDecoder | None:
        """The decoder of a ``Content-Encoding`` value; None when urllib3 must decode it.
        More than :data:`MAX_CODINGS` codings raise ResponseRejected."""
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
