"""The HTTP client of the portal's intake figures: the standard library's ``http.client`` on
one kept-alive connection, as the inbound figures already use.

Why not ``requests``: on these machines a ``requests.Session.post`` costs about 0.65 ms of
the client's CPU (``http.client``: about 0.17 ms), more than the portal's own work on an
intake. One client posting through ``requests`` to a bare Starlette endpoint that does
nothing but one durable insert reaches about 850 msg/s, so a figure taken through it
measures ``requests`` as much as the server. The scenarios print the ``requests`` figure
beside the key (``info``), in the same run, for anyone who calls Encore with it.
"""
from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlencode, urlsplit


class KeepAlive:
    """POSTs of JSON to one server over one kept-alive connection, with a bearer token."""

    def __init__(self, base: str, token: str | None = None, timeout: float = 60) -> None:
        parts = urlsplit(base)
        self._connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1",
                                                      parts.port or 80, timeout=timeout)
        self._headers = {"Content-Type": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"

    def post(self, path: str, body: Any, params: dict[str, Any] | None = None
             ) -> tuple[int, Any]:
        """(status, the answer's JSON, or its text when it is not JSON)."""
        url = f"{path}?{urlencode(params)}" if params else path
        self._connection.request("POST", url, body=json.dumps(body).encode(),
                                 headers=self._headers)
        reply = self._connection.getresponse()
        data = reply.read()
        try:
            return reply.status, json.loads(data)
        except ValueError:
            return reply.status, data.decode("utf-8", "replace")

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> KeepAlive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
