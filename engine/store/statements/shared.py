"""What both dialects' statements share: the columns of a message row, the fragments of a
claim, and the reads of one message. SQL is written with ``:name`` placeholders (sqlite3's
named style); :func:`pg` turns a statement into psycopg's."""
from __future__ import annotations

import re

_NAMED = re.compile(r"(?<!:):(\w+)")


def pg(sql: str) -> str:
    """``:name`` placeholders as psycopg's ``%(name)s`` (and ``%`` escaped)."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


# The columns of a message row, in MessageRow's order: what the dialects' statements select
# (SELECT_COLUMNS, of a header aliased ``h``) and their rows are read back by.
COLUMNS = ("id", "session_id", "source", "target", "kind", "body_class", "body", "status",
           "is_error", "error_text", "time_created", "time_processed", "time_completed",
           "corresponding_id", "retry_needed", "attempts", "first_attempt_at",
           "next_attempt_at", "claimed_by", "lease_expires_at", "claim_token", "trace_context",
           "waited")
SELECT_COLUMNS = ", ".join(f"h.{c}" for c in COLUMNS)
# the columns of COLUMNS that hold times (SQLite returns them as text, to be parsed)
TIMES = frozenset({"time_created", "time_processed", "time_completed", "first_attempt_at",
                   "next_attempt_at", "lease_expires_at"})

# The messages a claim may take: any due queued message, oldest first (PICK_ANY), or for a
# FIFO item only the head of the queue, in order (PICK_FIFO) — queued messages older than
# any held by another claim (``:held``: those the claimer holds itself, which it delivers in
# order before these), up to the first that is not due yet; index probes on (target, status,
# id) and (target, status, next_attempt_at) find the head, never a scan of the queue. Either
# way nothing while the item is switched off by an operator (item_state), else as the
# production file says (``:enabled``).
PICK_ANY = """
    SELECT q.id, q.attempts, q.deliveries FROM message_header q
    WHERE q.target = :target AND q.status = 'Queued'
      AND (q.next_attempt_at IS NULL OR q.next_attempt_at <= :now)
      AND coalesce((SELECT s.enabled FROM item_state s WHERE s.config_name = :target),
                   :enabled)
    ORDER BY q.id LIMIT :limit"""
PICK_FIFO = """
    SELECT q.id, q.attempts, q.deliveries FROM message_header q
    WHERE q.target = :target AND q.status = 'Queued'
      AND coalesce((SELECT s.enabled FROM item_state s WHERE s.config_name = :target),
                   :enabled)
      AND q.id < coalesce(
            (SELECT min(d.id) FROM message_header d
             WHERE d.target = :target AND d.status = 'Delivered' AND {not_held}), :no_id)
      AND q.id < coalesce(
            (SELECT min(w.id) FROM message_header w {due_index}
             WHERE w.target = :target AND w.status = 'Queued' AND w.next_attempt_at > :now),
            :no_id)
    ORDER BY q.id LIMIT :limit"""

# Of the picked messages (``cand``: id, attempts, deliveries) a claim takes those before the
# first *suspect* — a message whose count of deliveries is above 0: one of its deliveries
# never ended (its daemon died, froze past its lease or was killed during it). A suspect is
# delivered alone, so that a message that crashes or freezes its daemon does not take
# others down with it again and again: it is taken only when it comes first and the claimer
# holds no other message of the item (``:alone``); the claimer then takes nothing more of
# the item until it is done (engine.delivery.dispatch). ``isolate`` is the same rule in Python.
ISOLATE = """
    SELECT c.id, c.attempts, c.deliveries FROM cand c
    WHERE (c.deliveries = 0
           AND c.id < coalesce((SELECT min(s.id) FROM cand s WHERE s.deliveries > 0), :no_id))
       OR (:alone AND c.deliveries > 0 AND c.id = (SELECT min(f.id) FROM cand f))"""


# Claim the picked messages: Delivered, leased to :owner, a new fencing token, one more
# delivery counted, and — when :begin — attempt 1 counted for those never attempted (its
# row is inserted alongside).
CLAIM_SET = """
    status = 'Delivered', claimed_by = :owner, lease_expires_at = :expires,
    claim_token = h.claim_token + 1, time_processed = coalesce(h.time_processed, :now),
    deliveries = h.deliveries + 1,
    attempts = CASE WHEN :begin AND h.attempts = 0 THEN 1 ELSE h.attempts END,
    first_attempt_at = CASE WHEN :begin AND h.attempts = 0 THEN :now
                            ELSE h.first_attempt_at END,
    next_attempt_at = CASE WHEN :begin AND h.attempts = 0 THEN NULL
                           ELSE h.next_attempt_at END"""

# The columns a new request is inserted with, after its id (both dialects' intakes).
INSERT_MESSAGE_COLUMNS = ("session_id, source, target, kind, body_class, body, status, is_error, "
                          "time_created, retry_needed, attempts, claim_token, "
                          "idempotency_key, trace_context, waited")

# One message as it is now, and the same with its response's body (a waiter's looks).
MESSAGE = f"SELECT {SELECT_COLUMNS} FROM message_header h WHERE h.id = :id"
OUTCOME = (f"SELECT {SELECT_COLUMNS}, r.id, r.body_class, r.body FROM message_header h "
           "LEFT JOIN message_header r ON r.id = h.corresponding_id WHERE h.id = :id")
