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

# The transitions of a claimed message other than Completed (each dialect adds the casts of
# ``{time}`` and ``{ident}`` parameters). Each is one UPDATE of the message under one guard:
# ``:token``, its claim's token, still on a Delivered row (an expired claim leaves the token on
# a Queued one); NULL: unfenced. What else the transition writes follows in its transaction.
GUARD = "id = :id AND (:token{ident} IS NULL OR (claim_token = :token AND status = 'Delivered'))"
# attempt 1's true start (:started_at; NULL keeps it), or none once attempt 1 is taken back
_FIRST_ATTEMPT_AT = ("first_attempt_at = CASE WHEN attempts <> 1 THEN first_attempt_at "
                     "WHEN :taken_back = 1 THEN NULL "
                     "ELSE coalesce(:started_at{time}, first_attempt_at) END")
_TRANSITION = f"UPDATE message_header SET {{set}}{_FIRST_ATTEMPT_AT} WHERE {GUARD} " \
              "RETURNING id, target, waited"
# an attempt's end alone: the message stays as it is
ATTEMPT_ENDED = _TRANSITION.replace("{set}", "")
# back in the queue (a release, a parked retry, a hold): its delivery no longer counts;
# :taken_back 1: the attempt its claim began is taken back (TAKE_BACK)
REQUEUE = _TRANSITION.replace("{set}", (
    "status = 'Queued', claimed_by = NULL, lease_expires_at = NULL, "
    "deliveries = CASE WHEN deliveries > 0 THEN deliveries - 1 ELSE 0 END, "
    "next_attempt_at = coalesce(:due{time}, next_attempt_at), "
    "retry_needed = (retry_needed OR :retry), attempts = attempts - :taken_back, "))
# a blocking retry: the claim stays
RETRY_AT = _TRANSITION.replace("{set}", "retry_needed = true, next_attempt_at = :due{time}, ")
# ended otherwise than Completed
FINISH = _TRANSITION.replace("{set}", (
    "status = :status, is_error = :is_error, error_text = :error_text, retry_needed = false, "
    "next_attempt_at = NULL, time_completed = :now{time}, claimed_by = NULL, "
    "lease_expires_at = NULL, "))
TAKE_BACK = "DELETE FROM message_attempt WHERE id = :begun AND message_id = :id"
# the events a transition reports, one row each
INSERT_EVENT = ("INSERT INTO event_log (time_logged, type, config_name, job, message_id, "
                "session_id, source_class, source_method, text, stack) VALUES (:time_logged, "
                ":type, :config_name, :job, :message_id, :session_id, :source_class, "
                ":source_method, :text, :stack)")
