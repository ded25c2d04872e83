"""The command line, driven as a user would, on a real SQLite database: each command run in
the test process (``cli_in_process``: what is tested is what it prints and does), and
``encore log --follow`` as a process of its own."""
from __future__ import annotations

import json
import select
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from engine.clock import utcnow
from engine.store.sql import SqlStore
from tests.acceptance.daemon import cli_env, encore
from tests.waiting import wait_until

pytestmark = pytest.mark.cli_in_process

PRODUCTION = """
[production]
name = "CliTest"
database = "sqlite:///{db}"

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The production file and its database at the latest schema. The schema is made here
    as ``encore db upgrade`` makes it (tests/acceptance/test_second_hour_cli.py runs that
    command), without a process of its own for each of the tests here."""
    (tmp_path / "production.toml").write_text(PRODUCTION.format(db=tmp_path / "e.db"))
    store = SqlStore(f"sqlite:///{tmp_path / 'e.db'}")
    store.upgrade()
    store.dispose()
    return tmp_path


def test_send_prints_the_id_of_the_committed_message(workdir: Path) -> None:
    out = encore("send", "Echo", "--body", '{"text": "hi"}', cwd=workdir).stdout
    rows = [json.loads(line) for line in
            encore("messages", "--json", cwd=workdir).stdout.splitlines()]
    assert [(r["id"], r["status"], r["target"]) for r in rows] == [(int(out), "Queued", "Echo")]


@pytest.mark.parametrize(("target", "body", "expected"), [
    # malformed JSON
    ("Echo", '{"text": ', "not valid JSON"),
    # a field the request class does not have
    ("Echo", '{"txt": "hi"}', "unknown field(s) txt"),
    # a field of the wrong type
    ("Echo", '{"text": 5}', "field 'text' must be str"),
    # a target that is not in the production
    ("Nobody", '{"text": "hi"}', "unknown target 'Nobody'"),
    # NaN is not JSON (docs/settings.md, Numbers)
    ("Echo", '{"text": "hi", "count": NaN}', "NaN is not a JSON number"),
    # nor is an infinity, spelt out or overflowing a float
    ("Echo", '{"text": "hi", "count": -Infinity}', "-Infinity is not a JSON number"),
    ("Echo", '{"text": "hi", "count": 1e999}', "too large for a finite number"),
])
def test_send_refuses_bad_input_and_enqueues_nothing(workdir: Path, target: str, body: str,
                                                      expected: str) -> None:
    result = encore("send", target, "--body", body, cwd=workdir, check=False)
    assert result.returncode == 1
    assert expected in result.stderr
    assert encore("messages", "--json", cwd=workdir).stdout == ""


def stored_texts(workdir: Path) -> list[str]:
    rows = [json.loads(line) for line in
            encore("messages", "--json", cwd=workdir).stdout.splitlines()]
    return [r["body"]["text"] for r in rows]  # --json gives the body as JSON


def test_send_reads_the_body_from_a_file_or_stdin(workdir: Path) -> None:
    (workdir / "body.json").write_text('{"text": "from a file"}\n')
    encore("send", "Echo", "--body", "@body.json", cwd=workdir)
    encore("send", "Echo", "--body", "-", cwd=workdir, stdin='{"text": "from stdin"}')
    assert stored_texts(workdir) == ["from a file", "from stdin"]
    missing = encore("send", "Echo", "--body", "@nowhere.json", cwd=workdir, check=False)
    assert missing.returncode == 2 and "nowhere.json" in missing.stderr


def test_send_json_prints_one_object_with_the_id_status_and_no_response_yet(
        workdir: Path) -> None:
    out = json.loads(encore("send", "Echo", "--body", '{"text": "hi"}', "--json",
                            cwd=workdir).stdout)
    assert out == {"id": out["id"], "status": "Queued", "response": None}
    assert isinstance(out["id"], int) and stored_texts(workdir) == ["hi"]


def test_send_wait_json_that_times_out_exits_2_with_the_object_on_stdout(
        workdir: Path) -> None:
    result = encore("send", "Echo", "--body", '{"text": "hi"}', "--wait", "0.2", "--json",
                    cwd=workdir, check=False)
    assert result.returncode == 2 and "not finished after 0.2 s" in result.stderr
    assert json.loads(result.stdout) == {"id": 1, "status": "Queued", "response": None}


def finish_the_next_message_in_error(workdir: Path) -> threading.Thread:
    """A thread that plays a failing daemon: ends message 1 in Error once it is queued."""
    def play() -> None:
        store = SqlStore(f"sqlite:///{workdir / 'e.db'}")
        wait_until(lambda: store.get_message(1), 30, "message 1")
        store.finish(1, status="Error", error_text="HTTP 302 to /elsewhere", now=utcnow())
        store.dispose()
    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("as_json", [True, False])
def test_send_wait_on_a_message_that_ends_in_error_exits_1(workdir: Path, as_json) -> None:
    player = finish_the_next_message_in_error(workdir)
    result = encore("send", "Echo", "--body", '{"text": "hi"}', "--wait", "20",
                    *(["--json"] if as_json else []), cwd=workdir, check=False)
    player.join(10)
    assert result.returncode == 1
    assert "message 1 ended Error: HTTP 302 to /elsewhere" in result.stderr
    if as_json:
        assert json.loads(result.stdout) == {"id": 1, "status": "Error", "response": None}
    else:
        assert result.stdout == "" and result.stderr.splitlines()[0] == "1"


def test_send_many_enqueues_one_message_per_line_and_prints_the_ids(workdir: Path) -> None:
    (workdir / "batch.jsonl").write_text('{"text": "a"}\n\n{"text": "b"}\n{"text": "c"}\n')
    out = encore("send", "Echo", "--many", "batch.jsonl", cwd=workdir).stdout
    assert out.strip() == "3 messages enqueued: ids 1 to 3"
    assert stored_texts(workdir) == ["a", "b", "c"]
    out = encore("send", "Echo", "--many", "-", "--json", cwd=workdir,
                 stdin='{"text": "d"}\n{"text": "e"}\n').stdout
    assert json.loads(out) == {"count": 2, "first_id": 4, "last_id": 5}


@pytest.mark.parametrize(("lines", "expected"), [
    # a body that does not fit the request class, after a blank line
    ('{"text": "a"}\n\n{"text": 3}\n', "batch.jsonl line 3: Ping: field 'text' must be str"),
    # a line that is not JSON
    ('{"text": "a"}\n{"text": \n', "batch.jsonl line 2: body is not valid JSON"),
    # NaN on the first line
    ('{"text": "a", "count": NaN}\n', "batch.jsonl line 1: body is not valid JSON: NaN"),
])
def test_send_many_refuses_a_bad_line_by_its_number_and_enqueues_nothing(
        workdir: Path, lines: str, expected: str) -> None:
    (workdir / "batch.jsonl").write_text(lines)
    result = encore("send", "Echo", "--many", "batch.jsonl", cwd=workdir, check=False)
    assert result.returncode == 1 and expected in result.stderr
    assert encore("messages", "--json", cwd=workdir).stdout == ""


@pytest.mark.parametrize(("args", "expected"), [
    ((), "give either --body or --many"),  # neither
    (("--body", "{}", "--many", "-"), "give either --body or --many"),  # both
    (("--many", "-", "--wait", "1"), "does not go with --many"),  # nothing to wait for
])
def test_send_refuses_options_that_do_not_go_together(workdir: Path, args, expected) -> None:
    result = encore("send", "Echo", *args, cwd=workdir, check=False)
    assert result.returncode == 2 and expected in result.stderr


def test_log_follow_since_prints_only_events_inside_the_window(workdir: Path) -> None:
    store = SqlStore(f"sqlite:///{workdir / 'e.db'}")
    two_hours_ago = utcnow() - timedelta(hours=2)
    for text in ("old-1", "old-2"):
        store.events.write("Info", text, config_name="Echo", now=two_hours_ago)
    follower = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "log", "--follow", "--since", "1m", "--json"],
        cwd=workdir, env=cli_env(), stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)  # the first query and two polls of --follow find nothing new
        store.events.write("Info", "new", config_name="Echo")
        ready, _, _ = select.select([follower.stdout], [], [], 15)
        assert ready, "encore log --follow printed nothing"
        assert json.loads(follower.stdout.readline())["text"] == "new"
    finally:
        follower.terminate()
        follower.wait(10)
        follower.stdout.close()
        store.dispose()


def test_a_bad_production_file_is_refused_naming_the_item_and_key(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(PRODUCTION.format(db=tmp_path / "e.db")
                                     + "pool_size = 0\n")
    result = encore("-p", str(tmp_path / "p.toml"), "status", cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert "item 'Echo', setting 'pool_size'" in result.stderr


def test_the_production_file_is_found_through_the_environment(workdir: Path,
                                                               tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"ENCORE_PRODUCTION": str(workdir / "production.toml")}
    assert "CliTest" in encore("status", cwd=elsewhere, env=env).stdout


def test_simulate_prints_the_seed_timeline_as_json(tmp_path: Path) -> None:
    out = encore("simulate", "--response-timeout", "7", "--retry-interval", "10",
                 "--failure-timeout", "30", "--server-delay", "8", "--json", cwd=tmp_path).stdout
    events = json.loads(out)
    starts = [e["t"] for e in events if e["event"] == "attempt_start"]
    late = [e["t"] for e in events if e["event"] == "late_response"]
    (give_up,) = [e for e in events if e["event"] == "give_up"]
    assert starts == [0, 10, 20, 30]
    assert late == [8, 18, 28, 38]
    assert (give_up["t"], give_up["attempt"]) == (37, 4)


def test_simulate_reproduces_the_failover_seed(tmp_path: Path) -> None:
    args = ["simulate", "--response-timeout", "10", "--retry-interval", "0",
            "--failure-timeout", "35", "--server-delay", "11", "--servers", "3", "--json"]
    events = json.loads(encore(*args, cwd=tmp_path).stdout)
    starts = [(e["t"], e["server"]) for e in events if e["event"] == "attempt_start"]
    assert starts == [(0, 0), (10, 1), (20, 2), (30, 0)]
    assert [e["t"] for e in events if e["event"] == "give_up"] == [40]
    events = json.loads(encore(*args, "--no-idempotent", cwd=tmp_path).stdout)
    assert [e["t"] for e in events if e["event"] == "give_up"] == [10]


def timeline(tmp_path: Path, *args: str) -> list[dict]:
    return json.loads(encore("simulate", *args, "--json", cwd=tmp_path).stdout)


def test_simulate_follows_retry_after_from_the_end_of_each_failed_attempt(
        tmp_path: Path) -> None:
    events = timeline(tmp_path, "--failure-timeout", "30", "--fail-first", "2", "--status",
                      "429", "--retry-after", "2", "--backoff", "retry_after")
    assert [e["t"] for e in events if e["event"] == "attempt_start"] == [0, 2, 4]
    assert events[-1]["event"] == "success"


def test_simulate_gives_up_at_once_when_retry_after_exceeds_the_budget(tmp_path: Path) -> None:
    events = timeline(tmp_path, "--failure-timeout", "10", "--status", "429",
                      "--retry-after", "60", "--backoff", "retry_after")
    assert [e["event"] for e in events] == ["attempt_start", "attempt_error", "give_up"]
    assert events[-1]["t"] == 0


def test_simulate_exponential_backoff_doubles_and_max_attempts_bounds_it(tmp_path: Path) -> None:
    events = timeline(tmp_path, "--failure-timeout", "60", "--status", "503", "--backoff",
                      "exponential", "--backoff-base", "1", "--max-attempts", "4")
    assert [e["t"] for e in events if e["event"] == "attempt_start"] == [0, 1, 3, 7]
    assert events[-1]["event"] == "give_up"


def test_simulate_jitter_stays_inside_its_window(tmp_path: Path) -> None:
    # seed 002: base 0.5 s plus a jitter window of 1.5 s → the first delay is in [0.5, 2.0]
    for seed in ("1", "2", "3"):
        events = timeline(tmp_path, "--failure-timeout", "60", "--fail-first", "1", "--status",
                          "503", "--backoff", "exponential", "--backoff-base", "0.5",
                          "--jitter", "1.5", "--seed", seed)
        (second,) = [e["t"] for e in events if e["event"] == "attempt_start"][1:]
        assert 0.5 <= second <= 2.0
