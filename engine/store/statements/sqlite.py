"""SQLite's named statements: intake, claims and a success's transition (sqlite3's ``:name``
placeholders). Times are bound as SQLAlchemy stores them (naive UTC text).

Set-based statements take a batch as one JSON array (``json_each(:rows)``): one call into
the driver for the whole batch instead of one or more per message, each of which hands the
GIL back and must win it again while the write lock is held (a no-op drain spent 3-20 % less
CPU a message, BENCHMARKS.md). SQLite's JSON functions end a string at a NUL character: text
a statement reads from JSON is escaped by :func:`json_text` and unescaped by
:func:`_unescaped`, so that it arrives whole.
"""
from __future__ import annotations

from engine.store.statements.shared import (
    CLAIM_SET,
    COLUMNS,
    INSERT_MESSAGE_COLUMNS,
    MESSAGE,
    OUTCOME,
    PICK_ANY,
    PICK_FIFO,
    SELECT_COLUMNS,
)

__all__ = ["ACCEPT", "ACCEPT_CLAIMED", "ACCEPT_MANY", "BEGIN", "BEGIN_ONE", "CLAIM", "COMPLETE",
           "END_ATTEMPTS", "FIND_KEY", "INSERT", "MESSAGE", "NEXT_ID", "OUTCOME", "PICK_ANY",
           "PICK_FIFO_HEAD", "RESPONSE", "json_text"]


def json_text(text: str | None) -> str | None:
    """``text`` as it goes into a JSON batch: NUL and \\x01 escaped (see the module)."""
    if text is None or ("\x00" not in text and "\x01" not in text):
        return text
    return text.replace("\x01", "\x01\x02").replace("\x00", "\x01\x03")


def _unescaped(expr: str) -> str:
    """The SQL that undoes :func:`json_text` on ``expr``."""
    return f"replace(replace({expr}, char(1, 3), char(0)), char(1, 2), char(1))"


# The caller an idempotency key belongs to (docs/security.md): an API token's holder, whose
# messages' source is "api:<name>", or '' — the production itself (the command line,
# services, business processes). PostgreSQL's statements use the same expression.
_CALLER = "CASE WHEN substr(:source, 1, 4) = 'api:' THEN :source ELSE '' END"

# the next free message id (SQLite draws ids as max + 1, inside the write lock)
NEXT_ID = "SELECT coalesce(max(id), 0) + 1 FROM message_header"

# -- intake ----------------------------------------------------------------------------------
INSERT = (f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}) VALUES "
          "(:id, coalesce(:session_id, :id), :source, :target, 'request', :body_class, "
          ":body, 'Queued', 0, :now, 0, 0, 0, :key, :trace, 0)")
# intake of one message: its id drawn in the statement, so that it is one step (and read back
# as the row id: no RETURNING row, so one call into the driver, not three)
ACCEPT = (f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}, idempotency_caller) "
          "SELECT n.id, coalesce(:session_id, n.id), :source, :target, 'request', "
          ":body_class, :body, 'Queued', 0, :now, 0, 0, 0, :key, :trace, :waited, "
          f"{_CALLER} "
          "FROM (SELECT coalesce(max(id), 0) + 1 AS id FROM message_header) AS n")
FIND_KEY = ("SELECT id, session_id FROM message_header "
            f"WHERE target = :target AND idempotency_caller = {_CALLER} "
            "AND idempotency_key = :key")
# many intakes without an idempotency key or search properties: one autocommit statement,
# ids drawn in order from max(id) + 1 (the last one read back as the row id); each row is
# [session_id, source, target, body_class, body, now, trace, waited]
ACCEPT_MANY = (f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}, "
               "idempotency_caller) "
               "SELECT n.id + c.key, coalesce(c.value ->> 0, n.id + c.key), "
               "c.value ->> 1, c.value ->> 2, 'request', c.value ->> 3, c.value ->> 4, "
               "'Queued', 0, c.value ->> 5, 0, 0, 0, NULL, c.value ->> 6, c.value ->> 7, "
               "CASE WHEN substr(c.value ->> 1, 1, 4) = 'api:' THEN c.value ->> 1 "
               "ELSE '' END "
               "FROM (SELECT coalesce(max(id), 0) + 1 AS id FROM message_header) AS n, "
               "json_each(:rows) AS c ORDER BY c.key")
# a new message claimed as it is inserted (a direct take): Delivered, leased to :owner,
# token 1, one delivery, attempt 1 begun with :begin — as CLAIM_SET would claim it — if the
# item is not switched off and, FIFO, has nothing queued or delivered ahead
ACCEPT_CLAIMED = (
    f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}, idempotency_caller, "
    "claimed_by, lease_expires_at, time_processed, deliveries, first_attempt_at) "
    "SELECT n.id, coalesce(:session_id, n.id), :source, :target, 'request', "
    ":body_class, :body, 'Delivered', 0, :now, 0, :begin, 1, :key, :trace, 1, "
    f"{_CALLER}, :owner, :expires, :now, 1, CASE WHEN :begin THEN :now END "
    "FROM (SELECT coalesce(max(id), 0) + 1 AS id FROM message_header) AS n "
    "WHERE coalesce((SELECT s.enabled FROM item_state s WHERE s.config_name = :target), "
    ":enabled) AND NOT (:fifo AND EXISTS (SELECT 1 FROM message_header q "
    "WHERE q.target = :target AND q.status IN ('Queued', 'Delivered'))) "
    f"RETURNING {', '.join(COLUMNS)}")

# -- claims ----------------------------------------------------------------------------------
# The parked-message probe must range over (target, status, next_attempt_at), not scan the
# whole queue in id order, which SQLite's planner would otherwise choose.
PICK_FIFO_HEAD = PICK_FIFO.format(
    not_held="d.id NOT IN (SELECT value FROM json_each(:held))",
    due_index="INDEXED BY ix_message_header_due")
CLAIM = (f"UPDATE message_header AS h SET {CLAIM_SET} "
         f"WHERE h.id IN (SELECT value FROM json_each(:ids)) "
         f"RETURNING {SELECT_COLUMNS.replace('h.', '')}")
BEGIN = ("INSERT INTO message_attempt (message_id, attempt, started_at, server) "
         "SELECT value, 1, :now, :server FROM json_each(:ids) RETURNING id, message_id")
BEGIN_ONE = ("INSERT INTO message_attempt (message_id, attempt, started_at, server) "
             "VALUES (:id, 1, :now, :server) RETURNING id")

# -- a success -------------------------------------------------------------------------------
# The one statement that writes Completed, with the one guard: the completion's claim still
# holds the message (its token, and the message still Delivered). Attempt 1's true start
# (a claim may have begun it earlier) becomes the message's first_attempt_at, so that it stays
# min(message_attempt.started_at). Each row is [message_id, token, started_at, response_id];
# a message at most once per statement.
COMPLETE = ("UPDATE message_header AS h SET status = 'Completed', is_error = 0, "
            "retry_needed = 0, next_attempt_at = NULL, time_completed = :now, "
            "claimed_by = NULL, lease_expires_at = NULL, corresponding_id = c.value ->> 3, "
            "first_attempt_at = coalesce(CASE WHEN h.attempts = 1 THEN c.value ->> 2 END, "
            "h.first_attempt_at) "
            "FROM json_each(:rows) AS c "
            "WHERE h.id = c.value ->> 0 AND h.claim_token = c.value ->> 1 "
            "AND +h.status = 'Delivered' "
            "RETURNING id, session_id, target, source, waited")
# The one statement that ends attempts, a success's or a failure's: each row is
# [attempt_id, started_at, ended_at, server, outcome, status_code, error_text, token]
# (started_at null: as its begin recorded it; token not null: only while the attempt's
# message's claim of that token holds it — a success's is fenced by COMPLETE, which it
# follows).
END_ATTEMPTS = ("UPDATE message_attempt AS a SET "
                "started_at = coalesce(c.value ->> 1, a.started_at), "
                f"ended_at = c.value ->> 2, server = {_unescaped('c.value ->> 3')}, "
                "outcome = c.value ->> 4, status_code = c.value ->> 5, "
                f"error_text = {_unescaped('c.value ->> 6')} "
                "FROM json_each(:rows) AS c WHERE a.id = c.value ->> 0 "
                "AND (c.value ->> 7 IS NULL OR EXISTS (SELECT 1 FROM message_header h "
                "WHERE h.id = a.message_id AND h.claim_token = c.value ->> 7 "
                "AND h.status = 'Delivered'))")
RESPONSE = ("INSERT INTO message_header (id, session_id, source, target, kind, body_class, "
            "body, status, is_error, time_created, time_processed, time_completed, "
            "corresponding_id, retry_needed, attempts, claim_token) VALUES (:id, "
            ":session_id, :source, :target, 'response', :body_class, :body, 'Completed', "
            "0, :now, :now, :now, :request_id, 0, 0, 0)")
