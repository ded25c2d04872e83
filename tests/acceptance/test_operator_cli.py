"""Operating a production through the command line: a real ``encore run`` fills the database,
then resend, suspend, discard, suspended, enable, disable and purge are typed as commands and
checked in the SQL tables."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from engine.clock import utcnow
from engine.store.models import event_log, item_state, message_attempt, message_header
from engine.store.sql import SqlStore
from tests.acceptance.daemon import RunningDaemon, encore
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process

PRODUCTION = """
[production]
name = "OperatorTest"
database = "{url}"
poll_interval = 0.05

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"
pool_size = 2
"""
QUIET_PERIOD = 0.5  # seconds a disabled item is watched to see that it takes nothing
DONE = 20  # seconds to wait for the daemon to complete messages


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[tuple[Path, SqlStore]]:
    url = f"sqlite:///{tmp_path / 'ops.db'}"
    (tmp_path / "production.toml").write_text(PRODUCTION.format(url=url))
    encore("db", "upgrade", cwd=tmp_path)
    store = SqlStore(url)
    yield tmp_path, store
    store.dispose()


def send(cwd: Path, text: str) -> int:
    return int(encore("send", "Echo", "--body", json.dumps({"text": text}), cwd=cwd).stdout)


def refused(cwd: Path, *args: str) -> str:
    """Run a command that must be refused; return its one-line error."""
    result = encore(*args, cwd=cwd, check=False)
    assert result.returncode == 1, (args, result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    return result.stderr.strip()


def status(store: SqlStore, message_id: int) -> str:
    row = store.get_message(message_id)
    return row.status if row else "gone"


def count(store: SqlStore, table: object, where: object) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(where))
                   .scalar_one())


def test_an_operator_runs_a_production_from_the_command_line(
        workdir: tuple[Path, SqlStore]) -> None:
    cwd, store = workdir
    finished = [send(cwd, f"m{i}") for i in range(3)]
    with RunningDaemon(cwd) as daemon:
        wait_until(lambda: all(status(store, i) == "Completed" for i in finished), DONE,
                   "the first messages to complete")

        # Disabled: the daemon takes nothing, so the operator can act on queued messages.
        assert encore("disable", "Echo", "--reason", "maintenance", cwd=cwd).stdout.strip() \
            == "item Echo disabled"
        held = [send(cwd, f"h{i}") for i in range(2)]
        time.sleep(QUIET_PERIOD)
        assert [status(store, i) for i in held] == ["Queued", "Queued"]
        encore("suspend", str(held[0]), cwd=cwd)
        encore("discard", str(held[1]), cwd=cwd)
        resent = int(encore("resend", str(finished[0]), cwd=cwd).stdout)
        again = int(encore("resend", str(held[0]), cwd=cwd).stdout)

        assert refused(cwd, "resend", str(resent)) == (
            f"error: message {resent} is Queued; only Completed, Error, Discarded, Aborted or "
            "Suspended messages can be resent")
        assert f"message {finished[1]} is Completed; only Queued messages can be suspended" \
            in refused(cwd, "suspend", str(finished[1]))
        assert f"message {held[1]} is Discarded; only Queued or Suspended" \
            in refused(cwd, "discard", str(held[1]))
        assert "'Nowhere': no such item in the production (items: Echo)" \
            in refused(cwd, "resend", str(finished[1]), "--target", "Nowhere")
        assert "no item named 'Echoo' in the production (items: Echo)" \
            in refused(cwd, "enable", "Echoo")

        suspended = [json.loads(line) for line in
                     encore("suspended", "--json", cwd=cwd).stdout.splitlines()]
        assert [(s["id"], s["target"], s["attempts"]) for s in suspended] == [(held[0], "Echo", 0)]
        assert encore("suspended", "--item", "Other", cwd=cwd).stdout.strip() \
            == "no suspended messages"

        encore("enable", "Echo", cwd=cwd)
        wait_until(lambda: status(store, resent) == status(store, again) == "Completed", DONE,
                   "the resent messages to complete once Echo is enabled")
        assert daemon.terminate() == 0

    copy, original = store.get_message(resent), store.get_message(finished[0])
    assert (copy.source, copy.session_id, copy.body) == (
        f"resend:{finished[0]}", original.session_id, original.body)
    assert (status(store, held[0]), status(store, held[1])) == ("Suspended", "Discarded")
    with store.engine.connect() as conn:
        assert conn.execute(select(item_state.c.enabled)).scalars().all() == [True]
        item_events = conn.execute(select(event_log.c.text).where(
            event_log.c.config_name == "Echo", event_log.c.message_id.is_(None))
            .order_by(event_log.c.id)).scalars().all()
    assert item_events == ["item disabled by an operator: maintenance",
                           "item enabled by an operator"]
    log = [json.loads(line) for line in
           encore("log", "--message", str(finished[0]), "--json", cwd=cwd).stdout.splitlines()]
    assert [e["text"] for e in log] == [f"resent by an operator as message {resent}"]

    # Purge: the first three messages (and the discarded one) ended 40 days ago.
    old = [*finished, held[1]]
    responses = [store.get_message(i).corresponding_id for i in finished]
    with store.engine.begin() as conn:
        conn.execute(update(message_header).where(message_header.c.id.in_(old))
                     .values(time_completed=utcnow() - timedelta(days=40)))
    expected = "4 request(s), 3 response(s), 3 attempt(s), 2 event(s) older than 30d"
    dry = encore("purge", "--older-than", "30d", "--dry-run", cwd=cwd)
    assert dry.stdout.strip() == f"would delete {expected}"
    assert dry.stderr == ""  # the answer once, plainly: no log line, no Python repr
    assert all(status(store, i) != "gone" for i in old)
    done = encore("purge", "--older-than", "30d", cwd=cwd)
    assert done.stdout.strip() == f"deleted {expected}"
    assert "PurgeCounts" not in done.stderr and "deleted 4 request(s)" in done.stderr

    gone = [*old, *responses]
    assert [status(store, i) for i in gone] == ["gone"] * len(gone)
    assert count(store, message_attempt, message_attempt.c.message_id.in_(gone)) == 0
    assert count(store, event_log, event_log.c.message_id.in_(gone)) == 0
    assert [status(store, i) for i in (held[0], resent, again)] == [
        "Suspended", "Completed", "Completed"]
    assert count(store, event_log, event_log.c.message_id == held[0]) == 2  # suspend, resend
    result = encore("purge", "--older-than", "30 days", cwd=cwd, check=False)
    assert result.returncode == 2 and "30d, 12h or 90m" in result.stderr
