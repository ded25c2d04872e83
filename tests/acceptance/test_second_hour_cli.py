"""What the second hour past the demo broke on the command line (issue 26), driven as a user
would: `encore` commands (in the test process where only their output and effects are
tested, ``cli_in_process``), a real SQLite file (and PostgreSQL where the store is
touched). Points 1, 3-8; point 2 (first_attempt_at) is tests/integration/
test_second_hour_first_attempt.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url

from engine.client import accept_message, decode_body, send_message
from engine.config.production import parse_production
from engine.errors import MessageError
from engine.store import migrate
from engine.store.sql import SqlStore
from tests.acceptance.daemon import ROOT, RunningDaemon, encore
from tests.conftest import postgres_url, reset_postgres

PRODUCTION = """
[production]
name = "SecondHour"
database = "{database}"
poll_interval = 0.05

[[items]]
name = "Echo"
class = "tests.unit.sample_ops:EchoOperation"

[[items]]
name = "Any"
class = "tests.unit.sample_ops:RetryTwiceOperation"
[items.settings]
retry_interval = 0.1
"""
BAD_SETTINGS = """
[production]
name = "BadSettings"
database = "sqlite:///encore.db"

[[items]]
name = "Web"
class = "operations.http:HttpOperation"
[items.settings]
url = "http://127.0.0.1:9/"
retry_intervall = 5
"""


def write_production(directory: Path, database: str = "sqlite:///encore.db",
                     text: str = PRODUCTION) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "production.toml"
    path.write_text(text.format(database=database))
    return path


@pytest.fixture
def prod(tmp_path: Path) -> Path:
    """A production file whose database is a relative SQLite path, upgraded."""
    path = write_production(tmp_path / "prod")
    encore("-p", str(path), "db", "upgrade", cwd=tmp_path)
    return path


# -- 1. a relative SQLite path is the production file's ---------------------------------
@pytest.mark.cli_in_process
def test_a_relative_sqlite_path_is_read_from_the_production_files_directory(
        tmp_path: Path) -> None:
    path = write_production(tmp_path / "srv" / "prod")
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    beside = tmp_path / "srv" / "prod" / "encore.db"
    missing = encore("-p", str(path), "status", cwd=elsewhere, check=False)
    assert missing.returncode == 1
    assert f"the database sqlite:///{beside} does not exist yet" in missing.stderr
    assert not (elsewhere / "encore.db").exists()  # following the advice ...
    out = encore("-p", str(path), "db", "upgrade", cwd=elsewhere).stdout
    assert beside.exists() and not (elsewhere / "encore.db").exists()  # ... creates this one
    assert f"sqlite:///{beside}" in out
    # a relative -p, from yet another directory: the same database
    assert encore("-p", "srv/prod/production.toml", "status",
                  cwd=tmp_path).stdout.startswith(f"production SecondHour on sqlite:///{beside}")
    encore("-p", str(path), "send", "Echo", "--body", '{"text": "hi"}', cwd=elsewhere)
    rows = encore("-p", str(path), "messages", "--json", cwd=tmp_path / "srv").stdout
    assert len(rows.splitlines()) == 1


@pytest.mark.cli_in_process
def test_encore_database_url_stays_relative_to_the_current_directory(prod: Path,
                                                                     tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    env = {"ENCORE_DATABASE_URL": "sqlite:///from-env.db"}
    out = encore("-p", str(prod), "db", "upgrade", cwd=here, env=env).stdout
    assert (here / "from-env.db").exists() and not (prod.parent / "from-env.db").exists()
    assert f"sqlite:///{here / 'from-env.db'}" in out
    # without a production file at all, too (and the default's path is absolute)
    status = encore("messages", cwd=here, env=env)
    assert status.returncode == 0
    nothing = encore("messages", cwd=here, check=False)
    assert f"the database sqlite:///{here / 'encore.db'} does not exist yet" in nothing.stderr


# -- 3. db upgrade says what it did -----------------------------------------------------
def upgrade_messages(cwd: Path, url: str, path: Path) -> list[str]:
    """`encore db upgrade` on a new database, an up-to-date one, and one at an older
    revision."""
    said = [encore("-p", str(path), "db", "upgrade", cwd=cwd).stdout.strip()]
    said.append(encore("-p", str(path), "db", "upgrade", cwd=cwd).stdout.strip())
    engine = create_engine(url)
    head = migrate.current_revision(engine)
    assert head is not None
    engine.dispose()
    return [*said, head]


@pytest.mark.cli_in_process
def test_db_upgrade_says_created_upgraded_or_already_at_the_latest_schema(
        tmp_path: Path) -> None:
    path = write_production(tmp_path)
    url = f"sqlite:///{tmp_path / 'encore.db'}"
    created, again, head = upgrade_messages(tmp_path, url, path)
    assert created == f"database {url} created, at the latest schema (revision {head})"
    assert again == f"database {url} is already at the latest schema (revision {head})"
    old = tmp_path / "old"
    old_path = write_production(old)
    old_url = f"sqlite:///{old / 'encore.db'}"
    engine = create_engine(old_url)
    migrate.upgrade(engine, "0006")
    engine.dispose()
    out = encore("-p", str(old_path), "db", "upgrade", cwd=tmp_path).stdout.strip()
    assert out == (f"database {old_url} upgraded from revision 0006 to {head}, the latest "
                   "schema")


@pytest.mark.cli_in_process
def test_db_upgrade_says_what_it_did_on_postgresql(tmp_path: Path) -> None:
    url = postgres_url()
    reset_postgres(url)
    path = write_production(tmp_path, database=url)
    name = make_url(url).render_as_string(hide_password=True)
    created, again, head = upgrade_messages(tmp_path, url, path)
    assert created == (f"database {name}: Encore's tables created, at the latest schema "
                       f"(revision {head})")
    assert again == f"database {name} is already at the latest schema (revision {head})"
    reset_postgres(url)
    engine = create_engine(url)
    migrate.upgrade(engine, "0006")
    engine.dispose()
    out = encore("-p", str(path), "db", "upgrade", cwd=tmp_path).stdout.strip()
    assert out == f"database {name} upgraded from revision 0006 to {head}, the latest schema"


# -- 4. a known target whose settings are wrong ----------------------------------------
@pytest.mark.cli_in_process
def test_send_to_an_item_whose_settings_are_wrong_says_so(tmp_path: Path) -> None:
    path = write_production(tmp_path, text=BAD_SETTINGS)
    encore("db", "upgrade", cwd=tmp_path)
    for args in (("--body", '{"method": "GET", "path": "/"}'), ("--many", "-")):
        sent = encore("send", "Web", *args, cwd=tmp_path, check=False,
                      stdin='{"method": "GET", "path": "/"}\n')
        assert sent.returncode == 1
        error = sent.stderr.strip()
        assert error.startswith("error: target 'Web' is an item of the production, but its "
                                "settings are wrong: item 'Web', setting 'retry_intervall': "
                                "unknown setting"), error
        assert "unknown target" not in error and str(path.resolve()) in error
        assert error.endswith("nothing was enqueued")
    unknown = encore("send", "Nobody", "--body", "{}", cwd=tmp_path, check=False)
    assert unknown.returncode == 1 and "unknown target 'Nobody'" in unknown.stderr
    assert encore("messages", "--json", cwd=tmp_path).stdout == ""


# -- 5. listings are limited; show prints one message whole ---------------------------
@pytest.mark.cli_in_process
def test_messages_and_log_show_the_newest_50_and_say_how_many_were_left_out(
        prod: Path, tmp_path: Path) -> None:
    lines = "".join(json.dumps({"text": f"m{i}"}) + "\n" for i in range(60))
    encore("-p", str(prod), "send", "Echo", "--many", "-", cwd=tmp_path, stdin=lines)

    def listed(*args: str) -> tuple[list[dict], str]:
        done = encore("-p", str(prod), "messages", "--json", *args, cwd=tmp_path)
        return [json.loads(line) for line in done.stdout.splitlines()], done.stderr.strip()

    rows, said = listed()
    assert [r["id"] for r in rows] == list(range(11, 61))  # the newest, newest last
    assert said == ("(the newest 50 messages shown; 10 older messages left out: --limit N or "
                    "--all shows more)")
    assert rows[0]["body"] == {"text": "m10", "count": 1}  # JSON, not a string of JSON
    rows, said = listed("--limit", "5")
    assert [r["id"] for r in rows] == [56, 57, 58, 59, 60] and "55 older" in said
    rows, said = listed("--all")
    assert len(rows) == 60 and said == ""
    rows, said = listed("--limit", "60")
    assert len(rows) == 60 and said == ""
    table = encore("-p", str(prod), "messages", "--item", "Echo", cwd=tmp_path)
    assert len(table.stdout.splitlines()) == 51 and "10 older" in table.stderr
    both = encore("-p", str(prod), "messages", "--all", "--limit", "3", cwd=tmp_path,
                  check=False)
    assert both.returncode == 2 and "--limit N or --all" in both.stderr

    store = SqlStore(f"sqlite:///{prod.parent / 'encore.db'}")
    for i in range(55):
        store.events.write("Info", f"event {i}", config_name="Echo" if i % 5 else "Other")
    store.dispose()
    log = encore("-p", str(prod), "log", "--json", cwd=tmp_path)
    assert len(log.stdout.splitlines()) == 50 and "5 older events left out" in log.stderr
    log = encore("-p", str(prod), "log", "--item", "Echo", "--limit", "40", cwd=tmp_path)
    assert len(log.stdout.splitlines()) == 41 and "4 older events left out" in log.stderr
    log = encore("-p", str(prod), "log", "--item", "Other", cwd=tmp_path)
    assert len(log.stdout.splitlines()) == 12 and log.stderr == ""
    log = encore("-p", str(prod), "log", "--all", "--json", cwd=tmp_path)
    assert len(log.stdout.splitlines()) == 55 and log.stderr == ""


@pytest.mark.cli_in_process
def test_show_prints_one_message_whole(prod: Path, tmp_path: Path) -> None:
    with RunningDaemon(tmp_path, "-p", str(prod)) as daemon:
        sent = encore("-p", str(prod), "send", "Any", "--body", '{"order": 7}', "--wait", "30",
                      "--json", cwd=tmp_path)
        assert daemon.terminate() == 0, daemon.output
    mid = json.loads(sent.stdout)["id"]
    whole = json.loads(encore("-p", str(prod), "show", str(mid), "--json",
                              cwd=tmp_path).stdout)
    assert set(whole) == {"message", "response", "attempts", "events"}
    assert whole["message"]["id"] == mid and whole["message"]["body"] == {"order": 7}
    assert whole["response"]["body"] == {"attempt": 3}  # RetryTwiceOperation's answer
    assert [(a["attempt"], a["outcome"]) for a in whole["attempts"]] == [
        (1, "error"), (2, "error"), (3, "ok")]
    assert [e["type"] for e in whole["events"]] == ["Error", "Info"]
    # the response, shown from its side, names its request
    back = json.loads(encore("-p", str(prod), "show", str(whole["response"]["id"]), "--json",
                             cwd=tmp_path).stdout)
    assert back["request"]["id"] == mid and back["attempts"] == []
    text = encore("-p", str(prod), "show", str(mid), cwd=tmp_path).stdout
    assert text.startswith(f"message {mid}: request from cli to Any, Completed")
    for part in ("body:\n  {\n    \"order\": 7\n  }",
                 f"response (message {whole['response']['id']}, Completed):",
                 "attempts: 3", "events: 2", "first_attempt_at", "attempt 1 failed"):
        assert part in text, part
    missing = encore("-p", str(prod), "show", "9999", cwd=tmp_path, check=False)
    assert missing.returncode == 1 and "no message 9999" in missing.stderr


# -- 6, 7. the demo leaves its production file; names that explain themselves ---------
def test_the_demo_leaves_demo_toml_beside_its_database_and_says_what_to_try(
        tmp_path: Path) -> None:
    out = encore("demo", cwd=tmp_path).stdout
    assert (tmp_path / "demo.toml").exists() and (tmp_path / "encore.db").exists()
    assert "Seed" not in out and "DemoSoapService" in out
    for command in ("status", "messages", "show 2", "log --message 2", "trace 2"):
        assert f"  encore -p demo.toml {command} " in out, command
    status = encore("-p", "demo.toml", "status", cwd=tmp_path)
    assert status.returncode == 0
    assert status.stdout.startswith(f"production Demo on sqlite:///{tmp_path / 'encore.db'}")
    assert "DemoSoapService" in status.stdout
    # the file names its database relatively: it works from anywhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rows = encore("-p", str(tmp_path / "demo.toml"), "messages", "--json",
                  cwd=elsewhere).stdout.splitlines()
    assert len(rows) == 3  # two requests and the fast one's response
    assert "giving up" in encore("-p", "demo.toml", "show", "2", cwd=tmp_path).stdout

    # a demo.toml the demo did not write is left alone, and the hints do without it
    other = tmp_path / "other"
    other.mkdir()
    (other / "demo.toml").write_text("# mine\n")
    out = encore("demo", "--database", f"sqlite:///{other / 'demo.db'}", cwd=tmp_path).stdout
    assert (other / "demo.toml").read_text() == "# mine\n"
    assert f"left {other / 'demo.toml'} as it is" in out
    assert f"  ENCORE_DATABASE_URL=sqlite:///{other / 'demo.db'} encore show 2 " in out


def test_the_readme_says_what_the_scenarios_are() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for vague in ("seed scenario", "seed 003", "(seed"):
        assert vague not in readme.lower(), vague
    assert "Ensemble timeout scenario" in readme
    assert "idempotent-failover field report" in readme


# -- 8. a body is decoded once ----------------------------------------------------------
STRING_BODY = json.dumps(json.dumps({"text": "hi"}))  # "{\"text\": \"hi\"}"


@pytest.mark.cli_in_process
def test_a_json_string_body_is_a_string_not_the_object_it_spells(prod: Path,
                                                                  tmp_path: Path) -> None:
    for target, refusal in (("Echo", "Ping: body must be a JSON object, got str"),
                            ("Any", "body must be a JSON object, got str")):
        sent = encore("-p", str(prod), "send", target, "--body", STRING_BODY, cwd=tmp_path,
                      check=False)
        assert sent.returncode == 1 and refusal in sent.stderr, sent.stderr
        many = encore("-p", str(prod), "send", target, "--many", "-", cwd=tmp_path,
                      check=False, stdin=STRING_BODY + "\n")
        assert many.returncode == 1 and f"stdin line 1: {refusal}" in many.stderr, many.stderr
    assert encore("-p", str(prod), "messages", "--json", cwd=tmp_path).stdout == ""
    # the object itself goes in, once
    encore("-p", str(prod), "send", "Echo", "--body", '{"text": "hi"}', cwd=tmp_path)


@pytest.mark.cli_in_process
def test_every_way_in_decodes_a_body_once(tmp_path: Path) -> None:
    """The helpers the intake API uses (decode_body, then accept_message), and a Python
    caller's JSON text."""
    store = SqlStore(f"sqlite:///{tmp_path / 'e.db'}")
    store.upgrade()
    production = parse_production(PRODUCTION.format(database="sqlite://"), env={})
    for target in ("Echo", "Any"):
        with pytest.raises(MessageError, match="body must be a JSON object, got str"):
            accept_message(store, production, target, decode_body(STRING_BODY, where="request"))
        with pytest.raises(MessageError, match="body must be a JSON object, got str"):
            send_message(store, production, target, STRING_BODY)
    assert send_message(store, production, "Any", decode_body('{"a": 1}', where="x")) == 1
    assert json.loads(store.get_message(1).body) == {"a": 1}
    store.dispose()
