"""The caps of an HTTP server that shares its process with the daemon, and how they are
sized (docs/server-limits.md): every limited server of the process draws on one
:class:`DescriptorBudget`, so none can eat into the reserve kept for the daemon's own files.
"""
from __future__ import annotations

import ipaddress
import resource
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from engine.errors import ConfigurationError

__all__ = ["ConnectionGate", "DescriptorBudget", "ServerLimits", "open_file_limit",
           "process_budget", "reserve_for"]

RESERVE_MIN = 128
RESERVE_SHARE = 4
MIN_BUDGET = 16
PER_CLIENT_SHARE = 4
PER_CLIENT_MAX = 64
DEFAULT_MAX = 4096
UNLIMITED = 1 << 20  # what RLIM_INFINITY counts as


def open_file_limit() -> int:
    """The process's soft ``RLIMIT_NOFILE``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED if soft == resource.RLIM_INFINITY else int(soft)


def reserve_for(limit: int) -> int:
    """Descriptors kept for the daemon's own files under an open-file limit of ``limit``."""
    return max(RESERVE_MIN, limit // RESERVE_SHARE)


class DescriptorBudget:
    """Connections every limited server of the process may hold together; thread-safe."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = open_file_limit() if limit is None else limit
        self.reserve = reserve_for(self.limit)
        self.size = self.limit - self.reserve
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.size:
                return False
            self.used += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.used -= 1


_process_budget: DescriptorBudget | None = None
_budget_lock = threading.Lock()


def process_budget() -> DescriptorBudget:
    """The process's budget, sized from its limit when the first limited server starts."""
    global _process_budget
    with _budget_lock:
        if _process_budget is None:
            _process_budget = DescriptorBudget()
        return _process_budget


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLimits:
    """The caps of one server, resolved (:meth:`sized`): no zeros left."""

    max_connections: int
    max_connections_per_client: int
    read_timeout: float
    keepalive_timeout: float
    spared: tuple[str, ...] = ()  # networks the per-client cap spares (proxies), or "*"

    @classmethod
    def sized(cls, *, max_connections: int = 0, max_connections_per_client: int = 0,
              read_timeout: float = 10.0, keepalive_timeout: float = 5.0,
              spared: Iterable[str] = (), budget: DescriptorBudget | None = None,
              where: str = "[portal]") -> ServerLimits:
        """The caps, 0 meaning "sized from the open-file limit"; ConfigurationError if the
        limit cannot hold them."""
        budget = budget or process_budget()
        if budget.size < MIN_BUDGET:
            raise ConfigurationError(
                f"the open-file limit (RLIMIT_NOFILE) is {budget.limit}: too low to serve HTTP "
                f"and keep {budget.reserve} descriptors for the daemon's own files; raise it "
                f"to at least {budget.reserve + MIN_BUDGET} (ulimit -n, systemd LimitNOFILE=)",
                item=where)
        if max_connections > budget.size:
            raise ConfigurationError(
                f"{max_connections} connections do not fit the open-file limit "
                f"{budget.limit} less the {budget.reserve} descriptors kept for the daemon's "
                f"own files (at most {budget.size}); raise the limit (ulimit -n, systemd "
                "LimitNOFILE=) or set a lower value, or 0 to size it from the limit",
                item=where, key="max_connections")
        total = max_connections or min(budget.size, DEFAULT_MAX)
        per_client = (max_connections_per_client
                      or max(1, min(PER_CLIENT_MAX, total // PER_CLIENT_SHARE)))
        if per_client > total:
            raise ConfigurationError(
                f"{per_client} is more than max_connections ({total})", item=where,
                key="max_connections_per_client")
        return cls(max_connections=total, max_connections_per_client=per_client,
                   read_timeout=read_timeout, keepalive_timeout=keepalive_timeout,
                   spared=tuple(spared))


class ConnectionGate:
    """Counts one server's connections against its caps and the process's budget (on the
    server's loop thread only)."""

    def __init__(self, limits: ServerLimits, budget: DescriptorBudget | None = None) -> None:
        self.limits = limits
        self.budget = budget or process_budget()
        self.open = 0
        self.refused = 0
        self.per_client: Counter[str] = Counter()
        self._spare_all = "*" in limits.spared
        self._spared = [ipaddress.ip_network(n, strict=False) for n in limits.spared
                        if n != "*"]

    def admit(self, host: str) -> str | None:
        """Count a connection from ``host`` in; the name of the cap it hits otherwise."""
        if self.open >= self.limits.max_connections:
            return "max_connections"
        if (self.per_client[host] >= self.limits.max_connections_per_client
                and not self._is_spared(host)):
            return "max_connections_per_client"
        if not self.budget.take():
            return "the process's descriptor budget"
        self.open += 1
        self.per_client[host] += 1
        return None

    def release(self, host: str) -> None:
        self.open -= 1
        self.per_client[host] -= 1
        if not self.per_client[host]:
            del self.per_client[host]
        self.budget.give()

    def _is_spared(self, host: str) -> bool:
        if self._spare_all:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self._spared)
