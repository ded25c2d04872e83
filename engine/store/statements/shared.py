"""What both dialects' statements share, with ``:name`` placeholders (:func:`pg` turns them
into psycopg's)."""
from __future__ import annotations

import re

_NAMED = re.compile(r"(?<!:):(\w+)")


def pg(sql: str) -> str:
    """``:name`` placeholders as psycopg's ``%(name)s`` (and ``%`` escaped)."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


# the columns of a message row, in MessageRow's order (of a header aliased ``h``)
COLUMNS = ("id", "session_id", "source", "target", "kind", "body_class", "body", "status",
           "is_error", "error_text", "time_created", "time_processed", "time_completed",
           "corresponding_id", "retry_needed", "attempts", "first_attempt_at",
           "next_attempt_at", "claimed_by", "lease_expires_at", "claim_token", "trace_context",
           "waited")
SELECT_COLUMNS = ", ".join(f"h.{c}" for c in COLUMNS)
# the columns of COLUMNS that hold times (SQLite returns text)
TIMES = frozenset({"time_created", "time_processed", "time_completed", "first_attempt_at",
                   "next_attempt_at", "lease_expires_at"})

# The messages a claim may take: any due queued message, oldest first (PICK_ANY), or a FIFO
# item's head, in order, past the claimer's ``:held`` (PICK_FIFO), by index probes only;
# nothing while the item is switched off.
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
# first *suspect* (deliveries above 0: one never ended). A suspect is delivered alone, only
# when first and ``:alone``, so a message that kills its daemon takes no other down with it.
# ``isolate`` is the same rule in Python.
ISOLATE = """
    SELECT c.id, c.attempts, c.deliveries FROM cand c
    WHERE (c.deliveries = 0
           AND c.id < coalesce((SELECT min(s.id) FROM cand s WHERE s.deliveries > 0), :no_id))
       OR (:alone AND c.deliveries > 0 AND c.id = (SELECT min(f.id) FROM cand f))"""


# claim the picked messages: Delivered, leased, a new token, a delivery counted, and with
# :begin attempt 1 begun
CLAIM_SET = """
    status = 'Delivered', claimed_by = :owner, lease_expires_at = :expires,
    claim_token = h.claim_token + 1, time_processed = coalesce(h.time_processed, :now),
    deliveries = h.deliveries + 1,
    attempts = CASE WHEN :begin AND h.attempts = 0 THEN 1 ELSE h.attempts END,
    first_attempt_at = CASE WHEN :begin AND h.attempts = 0 THEN :now
                            ELSE h.first_attempt_at END,
    next_attempt_at = CASE WHEN :begin AND h.attempts = 0 THEN NULL
                           ELSE h.next_attempt_at END"""

# the columns a new request is inserted with, after its id
INSERT_MESSAGE_COLUMNS = ("session_id, source, target, kind, body_class, body, status, is_error, "
                          "time_created, retry_needed, attempts, claim_token, "
                          "idempotency_key, trace_context, waited")

# one message as it is now, and with its response's body
MESSAGE = f"SELECT {SELECT_COLUMNS} FROM message_header h WHERE h.id = :id"
OUTCOME = (f"SELECT {SELECT_COLUMNS}, r.id, r.body_class, r.body FROM message_header h "
           "LEFT JOIN message_header r ON r.id = h.corresponding_id WHERE h.id = :id")
