"""The SQL tables (docs/operating.md). Users query these directly: names are public."""
from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)

# re-exported: the portal and the command line read them here
from engine.store.statuses import FINAL_STATUSES as FINAL_STATUSES
from engine.store.statuses import MESSAGE_STATUSES as MESSAGE_STATUSES

metadata = MetaData()

# BigInteger ids on PostgreSQL; SQLite only auto-increments a plain INTEGER primary key.
_Id = BigInteger().with_variant(Integer(), "sqlite")
_Time = DateTime(timezone=True)


def _where(condition: str) -> dict[str, Any]:
    """The keyword arguments of a partial index on both dialects."""
    return {"postgresql_where": text(condition), "sqlite_where": text(condition)}


EVENT_TYPES = ("Assert", "Error", "Warning", "Info", "Trace", "Alert")

event_log = Table(
    "event_log", metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("time_logged", _Time, nullable=False),
    Column("type", String(10), nullable=False),
    Column("config_name", String(200)),
    Column("job", String(200)),
    Column("message_id", _Id),
    Column("session_id", _Id),
    Column("source_class", String(200)),
    Column("source_method", String(200)),
    Column("text", Text, nullable=False),
    Column("stack", Text),
    Index("ix_event_log_message", "message_id"),
    Index("ix_event_log_config_time", "config_name", "time_logged"),
)

message_header = Table(
    "message_header", metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("session_id", _Id),
    Column("source", String(200)),
    Column("target", String(200), nullable=False),
    Column("kind", String(10), nullable=False),  # request | response
    Column("body_class", String(300)),
    Column("body", Text),  # JSON
    Column("status", String(12), nullable=False),
    Column("is_error", Boolean, nullable=False, default=False),
    Column("error_text", Text),
    Column("time_created", _Time, nullable=False),
    Column("time_processed", _Time),
    Column("time_completed", _Time),
    Column("corresponding_id", _Id),
    Column("retry_needed", Boolean, nullable=False, default=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("first_attempt_at", _Time),
    Column("next_attempt_at", _Time),
    # Claim of the daemon working on it: who, and until when (renewed by its heartbeat).
    Column("claimed_by", String(100)),
    Column("lease_expires_at", _Time),
    # Grows by one with every claim: the fencing token a worker's writes are conditional on.
    Column("claim_token", _Id, nullable=False, default=0, server_default="0"),
    # The client's Idempotency-Key: one message per (target, caller, key) (docs/security.md,
    # docs/processes.md); the caller is an API token's holder (``api:<name>``, the source) or ''
    # for the production itself (the command line, services, business processes) — migration 0009.
    Column("idempotency_key", String(200)),
    Column("idempotency_caller", String(200), nullable=False, default="",
           server_default=text("''")),
    # The W3C trace context of the producer's span, kept with the message (docs/tracing.md).
    Column("trace_context", Text),
    # Someone waits for this message to end (docs/architecture.md, "Waiting is an event"): its end
    # is announced (NOTIFY encore_done on PostgreSQL, the doorbell on SQLite).
    Column("waited", Boolean, nullable=False, default=False, server_default=text("false")),
    # Deliveries begun (claims) and not ended by putting the message back in its queue: one
    # back in its queue with a count above 0 had deliveries that never ended, and after
    # max_deliveries of them it is Suspended (docs/architecture.md, "Poison messages"; migration
    # 0010).
    Column("deliveries", Integer, nullable=False, default=0, server_default="0"),
    Index("ix_message_header_queue", "target", "status", "id"),
    # Partial where most rows have nothing to find (migration 0007): a completion, which
    # clears the claim and the due time, then costs no entry in these.
    Index("ix_message_header_due", "target", "status", "next_attempt_at",
          **_where("next_attempt_at IS NOT NULL")),
    Index("ix_message_header_claim", "claimed_by", **_where("claimed_by IS NOT NULL")),
    Index("ix_message_header_session", "session_id"),
    Index("ix_message_header_idempotency", "target", "idempotency_caller", "idempotency_key",
          unique=True,
          **_where("idempotency_key IS NOT NULL")),
    Index("ix_message_header_status", "status", "id"),  # the Message Viewer's filters
    Index("ix_message_header_created", "time_created"),
    # The purge's (migration 0014): finished requests by when they ended, and the responses of
    # a batch of requests, found without reading the table.
    Index("ix_message_header_completed", "time_completed", "id", **_where("kind = 'request'")),
    Index("ix_message_header_corresponding", "corresponding_id",
          **_where("corresponding_id IS NOT NULL")),
)

message_attempt = Table(
    "message_attempt", metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("message_id", _Id, ForeignKey("message_header.id", ondelete="CASCADE"),
           nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("server", String(500)),
    Column("started_at", _Time, nullable=False),
    Column("ended_at", _Time),  # NULL while in flight
    Column("outcome", String(20)),
    Column("status_code", Integer),
    Column("error_text", Text),
    Index("ix_message_attempt_message", "message_id", "attempt"),
)

# Items disabled by an operator or by reply code action D override the production file.
item_state = Table(
    "item_state", metadata,
    Column("config_name", String(200), primary_key=True),
    Column("enabled", Boolean, nullable=False),
    Column("reason", Text),
    Column("updated_at", _Time, nullable=False),
)

# One row per running daemon; `heartbeat_at` tells whether it is alive.
daemon = Table(
    "daemon", metadata,
    Column("id", String(100), primary_key=True),
    Column("host", String(200), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("production", String(200)),
    Column("started_at", _Time, nullable=False),
    Column("heartbeat_at", _Time, nullable=False),
    Column("items", Text),
    # /proc/self/ns/pid of the daemon's process: its PID means something only to a daemon
    # in the same namespace (containers share host names, not PID namespaces).
    Column("pid_namespace", String(200)),
    # Its process's start time in clock ticks after the boot (/proc/PID/stat): a process
    # with the same PID and another start time is not the daemon (migration 0017).
    Column("process_start", BigInteger),
    # What the daemon runs of each item, as JSON (docs/portal.md, "what runs is what is
    # shown"; engine.store.running): rewritten when a state changes and at every reload.
    Column("item_states", Text),
)

# Leases daemons sharing one database hold on work only one of them may do at a time:
# "leader" (scheduled jobs) and "item:<config_name>" (a FIFO item, pool_size 1 with blocking
# retries). A lease is free once `expires_at` has passed; its owner renews it on every
# heartbeat and deletes it when it stops (docs/architecture.md).
lease = Table(
    "lease", metadata,
    Column("name", String(200), primary_key=True),
    Column("owner", String(100), nullable=False),  # daemon.id
    Column("acquired_at", _Time, nullable=False),
    Column("expires_at", _Time, nullable=False),
    Index("ix_lease_owner", "owner"),
)

# Where this host's monotonic clock stood against its wall clock when the daemons of an
# SQLite file last agreed: the wall time at which the monotonic clock of boot `boot` read 0.
# A daemon that finds another value has seen a step of the wall clock, and moves the stored
# due times and leases across it, once for all daemons (engine.store.clockstep; 0016).
clock_frame = Table(
    "clock_frame", metadata,
    Column("boot", String(100), primary_key=True),
    Column("zero_at", _Time, nullable=False),
)

# Users of the management portal and holders of API tokens (docs/portal.md), stored hashed.
USER_ROLES = ("viewer", "operator", "admin")
TOKEN_ROLES = ("sender", "viewer", "operator", "admin")

portal_user = Table(
    "portal_user", metadata,
    Column("name", String(200), primary_key=True),
    Column("role", String(20), nullable=False),
    Column("password_hash", Text, nullable=False),
    Column("created_at", _Time, nullable=False),
    # grows by one at each logout: the user's sessions issued before it end (migration 0009)
    Column("session_generation", Integer, nullable=False, default=0, server_default="0"),
    # how the user reads times: "UTC" or "local", the browser's zone (migration 0013)
    Column("time_zone", String(10), nullable=False, default="UTC", server_default="UTC"),
)

# Login attempts in the current window per key ("user:<name>", "addr:<client>"), counted
# before the password is checked, on every portal of the database (docs/security.md, "Logins").
login_guess = Table(
    "login_guess", metadata,
    Column("key", String(300), primary_key=True),
    Column("window_start", _Time, nullable=False),
    Column("guesses", Integer, nullable=False),
)

api_token = Table(
    "api_token", metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("role", String(20), nullable=False),
    Column("token_hash", String(200), nullable=False),
    Column("created_at", _Time, nullable=False),
    Column("last_used_at", _Time),
    Index("ix_api_token_hash", "token_hash", unique=True),
)

# An item's circuit breaker, shared by every daemon (docs/guards.md): state closed | open |
# half_open, consecutive failed attempts, until when it stays open, who runs the probe.
item_breaker = Table(
    "item_breaker", metadata,
    Column("config_name", String(200), primary_key=True),
    Column("state", String(10), nullable=False),
    Column("failures", Integer, nullable=False),
    Column("open_until", _Time),
    Column("probe_owner", String(100)),
    Column("updated_at", _Time, nullable=False),
    # one more with every transition: their order as the database applied them
    Column("version", Integer, nullable=False, default=0, server_default="0"),
)

# The search properties of a message: values at the dotted paths of its item's
# ``search_properties``, written when it is accepted (engine.store.properties; migration 0013).
message_property = Table(
    "message_property", metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("message_id", _Id, ForeignKey("message_header.id", ondelete="CASCADE"),
           nullable=False),
    Column("name", String(200), nullable=False),  # the path
    Column("value_text", String(200), nullable=False),
    Column("value_num", Float),  # the value as a number, when it is one
    Index("ix_message_property_text", "name", "value_text", "message_id"),
    Index("ix_message_property_num", "name", "value_num", "message_id"),
    Index("ix_message_property_message", "message_id"),
)

# A user's named Message Viewer queries (migration 0013).
saved_search = Table(
    "saved_search", metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("user_name", String(200), nullable=False),
    Column("name", String(200), nullable=False),
    Column("query", Text, nullable=False),  # the query string, without "?"
    Column("created_at", _Time, nullable=False),
    Index("ix_saved_search_user_name", "user_name", "name", unique=True),
)

# An item's rate-limit token bucket, shared by every daemon (docs/guards.md).
item_rate = Table(
    "item_rate", metadata,
    Column("config_name", String(200), primary_key=True),
    Column("tokens", Float, nullable=False),
    Column("refilled_at", _Time, nullable=False),
)

# What an inbound service (docs/inbound.md) was asked and answered, one row per call that
# put a message in: the caller's address (and the user or token it authenticated as), when
# the request came and when the answer went, for the Visual Trace's first participant.
inbound_call = Table(
    "inbound_call", metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("message_id", _Id, nullable=False),
    Column("service", String(200), nullable=False),
    Column("caller", String(200), nullable=False),
    Column("principal", String(200)),
    Column("request", String(200), nullable=False),
    Column("received_at", _Time, nullable=False),
    Column("answered_at", _Time),
    Column("answer", String(200)),
    Index("ix_inbound_call_message", "message_id"),
)

# Per item, minute and daemon: what the daemon counted in that minute (docs/portal.md; written
# from memory by engine.store.rollup, migration 0011). ``histogram``: attempt times in ms, as
# JSON ``{bucket upper bound: count}``.
ROLLUP_COUNTS = ("ok", "timeout", "connect_error", "reset", "http_status", "fault", "error",
                 "completed", "give_ups", "retries")
item_minute = Table(
    "item_minute", metadata,
    Column("config_name", String(200), primary_key=True),
    Column("minute", _Time, primary_key=True),
    Column("daemon_id", String(100), primary_key=True),
    *(Column(name, Integer, nullable=False, default=0, server_default="0")
      for name in ROLLUP_COUNTS),
    Column("attempt_ms_total", Float, nullable=False, default=0, server_default="0"),
    Column("histogram", Text),
    Index("ix_item_minute_minute", "minute"),
)
