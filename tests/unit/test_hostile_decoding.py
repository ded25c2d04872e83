"""The step-by-step body decoder (adapters.decoding; issue 22, finding 7): it decodes what
urllib3 decoded, in bounded steps, and stops at the deadline's check between any two."""
from __future__ import annotations

import gzip
import os
import zlib

import pytest
from urllib3.exceptions import DecodeError

from adapters.decoding import STEP_BYTES, BodyDecoder
from engine.errors import ResponseRejected

TEXT = os.urandom(50_000) + b"text " * 40_000  # some incompressible, some very compressible


def decode(header: str, body: bytes, chunk: int = 1000) -> bytes:
    decoder = BodyDecoder.for_header(header, lambda: None)
    assert decoder is not None
    out = []
    for i in range(0, len(body), chunk):
        out.extend(decoder.feed(body[i:i + chunk]))
    if header.strip() not in ("", "identity"):  # an uncoded body passes as it is read
        assert all(len(piece) <= STEP_BYTES for piece in out)
    return b"".join(out)


def raw_deflate(data: bytes) -> bytes:
    obj = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return obj.compress(data) + obj.flush()


CODINGS = [
    ("gzip", gzip.compress(TEXT)),
    ("x-gzip", gzip.compress(TEXT)),
    ("GZIP", gzip.compress(TEXT)),
    ("deflate", zlib.compress(TEXT)),  # zlib-wrapped
    ("deflate", raw_deflate(TEXT)),  # raw, as some servers send it
    ("identity", TEXT),
    ("", TEXT),
    ("gzip, gzip", gzip.compress(gzip.compress(TEXT))),
    ("deflate, gzip", gzip.compress(zlib.compress(TEXT))),
    ("gzip, identity, deflate", zlib.compress(gzip.compress(TEXT))),
    ("gzip", gzip.compress(TEXT[:1000]) + gzip.compress(TEXT[1000:])),  # two members
]


# read by 1, 7, 1000 and 1 MiB bytes at a time; byte by byte only the small bodies (the
# uncompressed ones would take a million reads)
@pytest.mark.parametrize(("header", "body", "chunk"), [
    (header, body, chunk) for header, body in CODINGS for chunk in (1, 7, 1000, 1 << 20)
    if chunk > 1 or len(body) <= 200_000])
def test_it_decodes_every_coding_urllib3_decodes(header: str, body: bytes, chunk: int) -> None:
    assert decode(header, body, chunk) == TEXT


def test_a_second_gzip_member_starting_in_a_later_read_is_decoded() -> None:
    first, second = gzip.compress(b"one "), gzip.compress(b"two")
    decoder = BodyDecoder.for_header("gzip", lambda: None)
    assert decoder is not None
    assert b"".join([*decoder.feed(first), *decoder.feed(second)]) == b"one two"


@pytest.mark.parametrize("header", ["gzip", "gzip, gzip"])
def test_members_that_end_on_a_full_step_are_each_decoded_once(header: str) -> None:
    members = gzip.compress(bytes(1 << 20)) * 5  # each 1 MiB: a whole number of steps
    body = members if header == "gzip" else gzip.compress(members)
    assert decode(header, body, 1 << 20) == bytes(5 << 20)


def test_garbage_after_a_gzip_member_is_ignored_as_urllib3_ignores_it() -> None:
    assert decode("gzip", gzip.compress(b"ok") + b"\x00garbage") == b"ok"


def test_a_body_that_is_not_what_it_says_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode("gzip", b"this is not gzip at all")


def test_more_than_five_codings_are_refused_as_an_answer() -> None:
    with pytest.raises(ResponseRejected, match="6 content codings"):
        BodyDecoder.for_header("gzip, " * 5 + "gzip", lambda: None)


@pytest.mark.parametrize("header", ["br", "zstd", "compress", "gzip, br", "whatever"])
def test_codings_it_does_not_know_are_left_to_urllib3(header: str) -> None:
    assert BodyDecoder.for_header(header, lambda: None) is None


class TimeUp(Exception):
    pass


def test_the_check_runs_before_every_step_of_every_layer_and_stops_the_decoding() -> None:
    """A double-gzip bomb: 1 GiB of zeros in about 1 KB."""
    inner = gzip.compress(bytes(64 << 20)) * 16  # 16 members: 1 GiB
    bomb = gzip.compress(inner)
    steps = []

    def check() -> None:
        steps.append(1)
        if len(steps) > 100:
            raise TimeUp

    decoder = BodyDecoder.for_header("gzip, gzip", check)
    assert decoder is not None
    produced = 0
    with pytest.raises(TimeUp):
        for piece in decoder.feed(bomb):
            produced += len(piece)
    assert produced <= 100 * STEP_BYTES  # stopped after 100 steps, nothing more decoded
