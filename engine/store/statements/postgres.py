"""PostgreSQL's named statements: intake, claims and the transitions of a claimed message, each
one statement (a CTE where a step changes several tables), in psycopg's ``%(name)s`` style."""
from __future__ import annotations

from engine.store import properties
from engine.store.statements import shared
from engine.store.statements.shared import (
    CLAIM_SET,
    INSERT_MESSAGE_COLUMNS,
    ISOLATE,
    PICK_ANY,
    PICK_FIFO,
    SELECT_COLUMNS,
    pg,
)
from engine.store.statements.shared import MESSAGE as _MESSAGE
from engine.store.statements.shared import OUTCOME as _OUTCOME

__all__ = ["ACCEPT", "ATTEMPT_ENDED", "CLAIM_ANY", "CLAIM_FIFO", "COMPLETE", "END_ATTEMPTS",
           "FIND_KEY", "FINISH", "INSERT", "INSERT_EVENT", "INSERT_PROPERTY", "MESSAGE", "OUTCOME",
           "REQUEUE", "RETRY_AT", "TAKE_BACK"]

# the caller an idempotency key belongs to, as on SQLite
_CALLER = "CASE WHEN substr(:source::text, 1, 4) = 'api:' THEN :source::text ELSE '' END"

MESSAGE = pg(_MESSAGE)
OUTCOME = pg(_OUTCOME)
INSERT_PROPERTY = pg(properties.INSERT_SQL)

INSERT = pg(
    f"WITH n AS (SELECT nextval('message_header_id_seq') AS id, b.ord, b.body_class, b.body "
    f"FROM unnest(:body_classes::text[], :bodies::text[]) WITH ORDINALITY "
    f"AS b(body_class, body, ord)), "
    f"ins AS (INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}) "
    f"SELECT n.id, coalesce(:session_id, n.id), :source, :target, 'request', n.body_class, "
    f"n.body, 'Queued', false, :now, false, 0, 0, NULL, :trace::text, false FROM n "
    f"ORDER BY n.ord "
    f"RETURNING id) "
    f"SELECT ins.id, pg_notify('encore_queue', :note) FROM ins ORDER BY ins.id")
# the unique index decides between racing duplicates: the loser reads the winner's row
ACCEPT = pg(
    f"WITH n AS (SELECT nextval('message_header_id_seq') AS id), "
    f"ins AS (INSERT INTO message_header (id, {INSERT_MESSAGE_COLUMNS}, "
    f"idempotency_caller) "
    f"SELECT n.id, coalesce(:session_id, n.id), :source::text, :target, 'request', "
    f":body_class, :body, 'Queued', false, :now, false, 0, 0, :key, :trace, :waited, "
    f"{_CALLER} FROM n "
    f"ON CONFLICT (target, idempotency_caller, idempotency_key) "
    f"WHERE idempotency_key IS NOT NULL "
    f"DO NOTHING RETURNING id, session_id) "
    f"SELECT ins.id, ins.session_id, pg_notify('encore_queue', :note) FROM ins")
FIND_KEY = pg("SELECT id, session_id FROM message_header "
              f"WHERE target = :target AND idempotency_caller = {_CALLER} "
              "AND idempotency_key = :key")

# each attempt's id is drawn with the claim (no join back); ISOLATE keeps a suspect alone
_CLAIM = (
    "WITH cand AS ({pick} FOR UPDATE{skip}), "
    f"pick AS ({ISOLATE}), "
    f"claimed AS (UPDATE message_header h SET {CLAIM_SET} FROM pick "
    f"WHERE h.id = pick.id "
    f"RETURNING {SELECT_COLUMNS}, pick.deliveries AS interrupted, "
    "CASE WHEN :begin AND pick.attempts = 0 "
    "THEN nextval('message_attempt_id_seq') END AS begun), "
    "begun AS (INSERT INTO message_attempt (id, message_id, attempt, started_at, server) "
    "SELECT begun, id, 1, :now, :server::text FROM claimed WHERE begun IS NOT NULL) "
    "SELECT * FROM claimed ORDER BY id")
# a FIFO head locked for a moment is waited for, never skipped; one statement per kind of
# claim, so each gets its own plan
CLAIM_FIFO = pg(_CLAIM.format(
    pick=PICK_FIFO.format(not_held="d.id <> ALL(:held::bigint[])", due_index=""), skip=""))
CLAIM_ANY = pg(_CLAIM.format(pick=PICK_ANY, skip=" SKIP LOCKED"))

# The one statement that ends attempts, over ``e`` (attempt_id, started_at, ended_at, server,
# outcome, status_code, error_text, token; token: fenced by that claim).
_END_ATTEMPTS = (
    "UPDATE message_attempt a SET started_at = coalesce(e.started_at, a.started_at), "
    "ended_at = e.ended_at, server = e.server, outcome = e.outcome, "
    "status_code = e.status_code, error_text = e.error_text FROM {ends} "
    "WHERE a.id = e.attempt_id AND (e.token IS NULL OR EXISTS (SELECT 1 FROM message_header h "
    "WHERE h.id = a.message_id AND h.claim_token = e.token AND h.status = 'Delivered'))")
END_ATTEMPTS = pg(_END_ATTEMPTS.format(
    ends="json_to_recordset(:ends::json) AS e(attempt_id bigint, started_at timestamptz, "
         "ended_at timestamptz, server text, outcome text, status_code int, error_text text, "
         "token bigint)"))
# a success's end, within COMPLETE: fenced there already
_SUCCESS_ENDS = ("(SELECT d.attempt_id, d.started_at, d.ended_at, d.server, 'ok' AS outcome, "
                 "NULL::int AS status_code, NULL::text AS error_text, NULL::bigint AS token "
                 "FROM d JOIN req ON req.id = d.id) AS e")

# The one statement that writes Completed, guarded by the claim's token and Delivered: it ends
# the attempt, stores the response and NOTIFYs waited-for ends. Completions come as one JSON
# document (json.dumps is C; psycopg's array dumping is Python). Returns id, waited, response id.
COMPLETE = pg(
    "WITH d AS (SELECT c.*, CASE WHEN c.body IS NOT NULL "
    "THEN nextval('message_header_id_seq') END AS response_id "
    "FROM json_to_recordset(:completions::json) AS c(id bigint, token bigint, "
    "attempt_id bigint, started_at timestamptz, ended_at timestamptz, server text, "
    "body_class text, body text)), "
    "req AS (UPDATE message_header h SET status = 'Completed', is_error = false, "
    "retry_needed = false, next_attempt_at = NULL, time_completed = :now, "
    "claimed_by = NULL, lease_expires_at = NULL, corresponding_id = d.response_id, "
    "first_attempt_at = coalesce(CASE WHEN h.attempts = 1 THEN d.started_at END, "
    "h.first_attempt_at) FROM d WHERE h.id = d.id AND h.claim_token = d.token "
    "AND h.status = 'Delivered' "
    "RETURNING h.id, h.session_id, h.target, h.source, h.waited, h.corresponding_id), "
    f"att AS ({_END_ATTEMPTS.format(ends=_SUCCESS_ENDS)} RETURNING a.id), "
    "resp AS (INSERT INTO message_header (id, session_id, source, target, kind, "
    "body_class, body, status, is_error, time_created, time_processed, time_completed, "
    "corresponding_id, retry_needed, attempts, claim_token) SELECT d.response_id, "
    "req.session_id, req.target, coalesce(req.source, ''), 'response', d.body_class, "
    "d.body, 'Completed', false, :now, :now, :now, d.id, false, 0, 0 FROM d JOIN req "
    "ON req.id = d.id WHERE d.body IS NOT NULL RETURNING id) "
    "SELECT req.id, req.waited, req.corresponding_id, CASE WHEN req.waited THEN "
    "pg_notify('encore_done', '{\"kind\":\"done\",\"ids\":[' || req.id || ']}') END FROM req")


# The other transitions of a claimed message (engine/store/statements/shared.py), each NOTIFYing
# what it announces with its commit: work for a message back in its queue, the end of a
# waited-for one.
def _transition(update: str, note: str = "NULL") -> str:
    return pg(f"WITH m AS ({update.format(time='::timestamptz', ident='::bigint')}) "
              f"SELECT m.id, m.target, m.waited, {note} FROM m")


ATTEMPT_ENDED = _transition(shared.ATTEMPT_ENDED)
RETRY_AT = _transition(shared.RETRY_AT)
REQUEUE = _transition(shared.REQUEUE, "pg_notify('encore_queue', "
                      "'{\"kind\":\"work\",\"item\":' || to_json(m.target)::text || '}')")
FINISH = _transition(shared.FINISH, "CASE WHEN m.waited THEN pg_notify('encore_done', "
                     "'{\"kind\":\"done\",\"ids\":[' || m.id || ']}') END")
TAKE_BACK = pg(shared.TAKE_BACK)
INSERT_EVENT = pg(shared.INSERT_EVENT)
