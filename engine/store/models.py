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
    # Idempotency-Key: one message per (target, caller, key); caller ``api:<name>`` or ''
    Column("idempotency_key", String(200)),
    Column("idempotency_caller", String(200), nullable=False, default="",
           server_default=text("''")),
    # the W3C trace context of the producer's span (docs/tracing.md)
    Column("trace_context", Text),
    # someone waits for its end, so the end is announced (docs/waiting.md)
    Column("waited", Boolean, nullable=False, default=False, server_default=text("false")),
    # deliveries begun and not ended by a put-back; see "Poison messages" in architecture.md
    Column("deliveries", Integer, nullable=False, default=0, server_default="0"),
    Index("ix_message_header_queue", "target", "status", "id"),
    # partial: a completion, which clears the claim and due time, costs no entry in these
    Index("ix_message_header_due", "target", "status", "next_attempt_at",
          **_where("next_attempt_at IS NOT NULL")),
    Index("ix_message_header_claim", "claimed_by", **_where("claimed_by IS NOT NULL")),
    Index("ix_message_header_session", "session_id"),
    Index("ix_message_header_idempotency", "target", "idempotency_caller", "idempotency_key",
          unique=True,
          **_where("idempotency_key IS NOT NULL")),
    Index("ix_message_header_status", "status", "id"),  # the Message Viewer's filters
    Index("ix_message_header_created", "time_created"),
    # the purge's: finished requests by end time, and responses by request
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
    # /proc/self/ns/pid: a PID means something only within the same namespace
    Column("pid_namespace", String(200)),
    # start time in clock ticks after boot: the same PID with another start is not the daemon
    Column("process_start", BigInteger),
    # what the daemon runs of each item, as JSON (engine.store.running)
    Column("item_states", Text),
)

# Leases on work only one daemon may do at a time: "leader" and "item:<config_name>" (a FIFO
# item); free once `expires_at` has passed (docs/architecture.md).
lease = Table(
    "lease", metadata,
    Column("name", String(200), primary_key=True),
    Column("owner", String(100), nullable=False),  # daemon.id
    Column("acquired_at", _Time, nullable=False),
    Column("expires_at", _Time, nullable=False),
    Index("ix_lease_owner", "owner"),
)

# The wall time at which the monotonic clock of boot `boot` read 0, as the daemons of an
# SQLite file last agreed (engine.store.clockstep).
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
    # grows by one at each logout, ending the sessions issued before it
    Column("session_generation", Integer, nullable=False, default=0, server_default="0"),
    # "UTC" or "local"
    Column("time_zone", String(10), nullable=False, default="UTC", server_default="UTC"),
)

# Login attempts in the current window per key ("user:<name>", "addr:<client>") (docs/security.md).
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

# An item's circuit breaker, shared by every daemon (docs/guards.md).
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

# A message's search properties, written when it is accepted (engine.store.properties).
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

# A user's named Message Viewer queries.
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

# What an inbound service (docs/inbound.md) was asked and answered, per call that put a
# message in: the Visual Trace's first participant.
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

# Per item, minute and daemon: what the daemon counted (engine.store.rollup). ``histogram``:
# attempt times in ms as JSON ``{bucket upper bound: count}``.
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
