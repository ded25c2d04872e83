"""The HTTP servers' transport (engine.serving.limited_server.CoalescingTransport): what a
response writes in one run of the event loop leaves as one write of the real transport, in
order, before a close; an abort sends nothing. The transport under it is a real asyncio
transport on one end of a socket pair; the other end reads what arrived."""
from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from engine.serving.limited_server import COALESCE_BYTES, CoalescingTransport


class Counting:
    """Passes everything to the real transport, counting the writes."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def received(peer: socket.socket) -> bytes:
    """Everything the peer gets until the connection closes."""
    peer.settimeout(10)
    chunks = []
    while chunk := peer.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def run(scenario: Callable[[CoalescingTransport, asyncio.AbstractEventLoop], Any]
        ) -> tuple[list[bytes], bytes]:
    """``scenario(transport, loop)`` on a real transport; the writes that reached it and
    the bytes the peer received once the transport closed."""
    ours, peer = socket.socketpair()

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        real, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
        counting = Counting(real)
        transport = CoalescingTransport(counting, loop)  # type: ignore[arg-type]
        result = scenario(transport, loop)
        if asyncio.iscoroutine(result):
            await result
        for _ in range(3):
            await asyncio.sleep(0)
        if not real.is_closing():
            transport.close()
        await asyncio.sleep(0.01)
        return counting.writes

    with peer:
        writes = asyncio.run(main())
        return writes, received(peer)


def test_a_head_and_body_written_together_leave_as_one_write() -> None:
    def answer(transport: CoalescingTransport, loop: Any) -> None:
        transport.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 9\r\n\r\n")
        transport.write(b'{"id": 1}')

    writes, got = run(answer)
    assert writes == [b'HTTP/1.1 202 Accepted\r\ncontent-length: 9\r\n\r\n{"id": 1}']
    assert got == writes[0]


def test_writes_of_separate_runs_stay_separate_and_in_order() -> None:
    async def stream(transport: CoalescingTransport, loop: Any) -> None:
        transport.write(b"one ")
        await asyncio.sleep(0.001)
        transport.write(b"two ")
        transport.write(b"three")

    writes, got = run(stream)
    assert writes == [b"one ", b"two three"]
    assert got == b"one two three"


def test_a_close_sends_what_was_written_first() -> None:
    head, rest = b"HTTP/1.1 408 Request Timeout\r\n", b"connection: close\r\n\r\n"
    buffered = []

    def refuse(transport: CoalescingTransport, loop: Any) -> None:
        transport.write(head)
        transport.write(rest)
        buffered.append(transport.get_write_buffer_size())  # pending bytes count
        transport.close()

    writes, got = run(refuse)
    assert buffered == [len(head) + len(rest)]
    assert writes == [head + rest]
    assert got == head + rest


def test_an_abort_sends_nothing_pending() -> None:
    def give_up(transport: CoalescingTransport, loop: Any) -> None:
        transport.write(b"HTTP/1.1 200 OK\r\n")
        transport.abort()

    writes, got = run(give_up)
    assert writes == []
    assert got == b""


def test_everything_else_is_the_transport_s_own() -> None:
    seen: dict[str, Any] = {}

    def look(transport: CoalescingTransport, loop: Any) -> None:
        seen["socket"] = transport.get_extra_info("socket")
        transport.pause_reading()
        seen["reading"] = transport.is_reading()
        transport.resume_reading()

    run(look)
    assert seen["socket"] is not None
    assert seen["reading"] is False


def test_a_large_body_goes_at_once_and_meets_flow_control() -> None:
    chunk = b"x" * (COALESCE_BYTES // 2)
    held = []

    def stream(transport: CoalescingTransport, loop: Any) -> None:
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(chunk)
        held.append(transport.get_write_buffer_size())  # not sent yet
        transport.write(chunk)  # over the bound: all of it leaves now, in one write

    writes, got = run(stream)
    assert held == [len(b"HTTP/1.1 200 OK\r\n\r\n") + len(chunk)]
    assert writes == [b"HTTP/1.1 200 OK\r\n\r\n" + chunk + chunk]
    assert got == writes[0]
