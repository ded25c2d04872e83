"""SQLite's named statements: intake, claims and the transitions of a claimed message (``:name``
placeholders; times as naive UTC text).

Set-based statements take a batch as one JSON array (``json_each(:rows)``): one driver call per
batch while the write lock is held. JSON strings end at NUL, so text is escaped by
:func:`json_text` and unescaped by :func:`_unescaped`.
"""
from __future__ import annotations

from engine.store.statements import shared
from engine.store.statements.shared import (
    CLAIM_SET,
    COLUMNS,
    INSERT_EVENT,
    INSERT_MESSAGE_COLUMNS,
    MESSAGE,
    OUTCOME,
    PICK_ANY,
    PICK_FIFO,
    SELECT_COLUMNS,
    TAKE_BACK,
)

__all__ = ["ACCEPT", "ACCEPT_CLAIMED", "ACCEPT_MANY", "ATTEMPT_ENDED", "BEGIN", "BEGIN_ONE",
           "CLAIM", "COMPLETE", "END_ATTEMPTS", "FINISH", "FIND_KEY", "INSERT", "INSERT_EVENT",
           "MESSAGE", "NEXT_ID", "OUTCOME", "PICK_ANY", "PICK_FIFO_HEAD", "REQUEUE", "RESPONSE",
           "RETRY_AT", "TAKE_BACK", "json_text"]


def json_text(text: str | None) -> str | None:
    """``text`` as it goes into a JSON batch: NUL and \\x01 escaped."""
    if text is None or ("\x00" not in text and "\x01" not in text):
        return text
    return text.replace("\x01", "\x01\x02").replace("\x00", "\x01\x03")


def _unescaped(expr: str) -> str:
    """The SQL that undoes :func:`json_text` on ``expr``."""
    return f"replace(replace({expr}, char(1, 3), char(0)), char(1, 2), char(1))"


# the caller an idempotency key belongs to: "api:<name>" sources, or '' (as on PostgreSQL)
_CALLER = "CASE WHEN substr(:source, 1, 4) = 'api:' THEN :source ELSE '' END"

# the next free message id (drawn inside the write lock)
NEXT_ID = "SELECT coalesce(max(id), 0) + 1 FROM message_header"

INSERT = (f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}) VALUES "
          "(:id, coalesce(:session_id, :id), :source, :target, 'request', :body_class, "
          ":body, 'Queued', 0, :now, 0, 0, 0, :key, :trace, 0)")
# intake of one message, its id drawn in the statement (read back as the row id)
ACCEPT = (f"INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}, idempotency_caller) "
          "SELECT n.id, coalesce(:session_id, n.id), :source, :target, 'request', "
          ":body_class, :body, 'Queued', 0, :now, 0, 0, 0, :key, :trace, :waited, "
          f"{_CALLER} "
          "FROM (SELECT coalesce(max(id), 0) + 1 AS id FROM message_header) AS n")
FIND_KEY = ("SELECT id, session_id FROM message_header "
            f"WHERE target = :target AND idempotency_caller = {_CALLER} "
            "AND idempotency_key = :key")
# many intakes without key or search properties; each row is
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
# a new message claimed as it is inserted (a direct take), as CLAIM_SET would claim it
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

# the parked-message probe ranges over (target, status, next_attempt_at), not the id order
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

# The one statement that writes Completed, guarded by the claim's token and Delivered; it
# keeps first_attempt_at = min(started_at). Rows: [message_id, token, started_at, response_id].
COMPLETE = ("UPDATE message_header AS h SET status = 'Completed', is_error = 0, "
            "retry_needed = 0, next_attempt_at = NULL, time_completed = :now, "
            "claimed_by = NULL, lease_expires_at = NULL, corresponding_id = c.value ->> 3, "
            "first_attempt_at = coalesce(CASE WHEN h.attempts = 1 THEN c.value ->> 2 END, "
            "h.first_attempt_at) "
            "FROM json_each(:rows) AS c "
            "WHERE h.id = c.value ->> 0 AND h.claim_token = c.value ->> 1 "
            "AND +h.status = 'Delivered' "
            "RETURNING id, session_id, target, source, waited")
# The one statement that ends attempts. Rows: [attempt_id, started_at, ended_at, server,
# outcome, status_code, error_text, token] (token: fenced by that claim).
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

# the other transitions of a claimed message (engine/store/statements/shared.py)
ATTEMPT_ENDED, REQUEUE, RETRY_AT, FINISH = (
    s.format(time="", ident="")
    for s in (shared.ATTEMPT_ENDED, shared.REQUEUE, shared.RETRY_AT, shared.FINISH))
