"""A business process used only by the benchmarks (bench/latency.py)."""
from __future__ import annotations

import time
from typing import Any

from engine import BusinessProcess


class SyncCaller(BusinessProcess):
    """Calls ``target`` ``n`` times in a row with :meth:`send_request_sync` and answers the
    duration of each call in milliseconds (``{"ms": [...]}``), timed inside the process
    with ``time.perf_counter``: ``process_call_ms_p50`` (bench/latency.py). The request:
    ``{"n": 100, "target": "Echo", "timeout": 10}``."""

    def on_request(self, request: Any) -> dict[str, Any]:
        data = request.data
        target, n, timeout = data.get("target", "Echo"), int(data["n"]), data.get("timeout", 10)
        durations = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.send_request_sync(target, {}, timeout=timeout)
            durations.append((time.perf_counter() - t0) * 1000)
        return {"ms": durations}
