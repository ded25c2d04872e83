"""Announcements are typed values, JSON on the wire: an item's name can never be taken for
another kind of announcement, whatever it holds (docs/architecture.md, issue 21)."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.store.doorbell import Doorbell, socket_directory
from engine.store.notify import Announcement, Kind, done_announcements

NAMES = ["Echo", "breaker Echo", "switch on Echo", 'quote " and \\ back', "ünïcødé", ""]


@pytest.mark.parametrize("name", NAMES)
def test_every_kind_survives_the_wire_whatever_the_item_is_called(name: str) -> None:
    for note in (Announcement.work(name), Announcement.work(name, urgent=True),
                 Announcement.switch(name, True), Announcement.switch(name, False),
                 Announcement.breaker(name)):
        back = Announcement.from_json(note.to_json())
        assert back == note and back.item == name


def test_done_announcements_are_split_to_fit_a_notify_payload() -> None:
    notes = done_announcements(list(range(1, 1201)))
    assert [len(n.ids) for n in notes] == [500, 500, 200]
    assert all(len(n.to_json()) < 8000 for n in notes)
    assert Announcement.from_json(notes[2].to_json()) == notes[2]
    assert notes[0].kind is Kind.DONE and notes[0].channel == "encore_done"


@pytest.mark.parametrize("garbage", ["breaker Echo", "{}", '{"kind": "nope"}', "[1]",
                                     '{"kind": "done", "ids": ["x"]}'])
def test_what_is_not_an_announcement_is_ignored(garbage: str) -> None:
    assert Announcement.from_json(garbage) is None


def test_a_doorbell_rings_the_other_processes_sockets_and_not_its_own(tmp_path: Path) -> None:
    import threading

    db = str(tmp_path / "e.db")
    heard: list[Announcement] = []
    got = threading.Event()
    listener, sender = Doorbell(db), Doorbell(db)

    def hear(note: Announcement) -> None:
        heard.append(note)
        got.set()

    listener.listen(hear)
    try:
        listener.ring([Announcement.work("self")])  # its own socket: not rung
        sender.ring([Announcement.work("A"), Announcement.done([7])])
        assert got.wait(5)
        deadline = 50
        while len(heard) < 2 and deadline:
            got.wait(0.1)
            deadline -= 1
        assert heard == [Announcement.work("A"), Announcement.done([7])]
    finally:
        listener.close()
    assert not Path(socket_directory(db)).exists()  # its socket is gone, and its directory


def test_the_last_doorbell_to_close_removes_the_temporary_directory_and_no_other(
        tmp_path: Path) -> None:
    deep = str(tmp_path / ("d" * 120) / "e.db")  # its sockets live in the temp dir
    first, second = Doorbell(deep), Doorbell(deep)
    first.listen(lambda note: None)
    second.listen(lambda note: None)
    directory = Path(socket_directory(deep))
    first.close()
    assert directory.is_dir() and len(list(directory.iterdir())) == 1  # the other listens
    second.close()
    assert not directory.exists()  # nothing left behind in the temporary directory
    again = Doorbell(deep)
    again.listen(lambda note: None)  # a later process makes it again
    assert len(list(directory.iterdir())) == 1
    again.close()


def test_a_socket_left_by_a_killed_process_is_removed_by_the_next_ring(tmp_path: Path) -> None:
    import socket

    db = str(tmp_path / "e.db")
    directory = Path(socket_directory(db))
    directory.mkdir(mode=0o700)
    stale = directory / "12345-dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(stale))
    s.close()  # bound once, nobody listens: as after a kill -9
    Doorbell(db).ring([Announcement.work("A")])
    assert not stale.exists()


def test_a_database_path_too_long_for_a_socket_address_rings_in_the_temp_dir(
        tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120) / "e.db"
    directory = socket_directory(str(deep))
    assert not directory.startswith(str(tmp_path)) and len(directory) < 80
    assert socket_directory(str(deep)) == directory  # every process finds the same one


def test_a_hub_remembers_the_last_ends_announced_to_it() -> None:
    from engine.store.completions import RECENT, CompletionHub

    started: list[bool] = []
    hub = CompletionHub(on_first_watch=lambda: started.append(True))
    assert not hub.hearing
    hub.ended([1, 2])
    assert hub.ended_lately(1) and hub.ended_lately(2) and not hub.ended_lately(3)
    with hub.watching(3, lambda: None):
        assert hub.hearing and started == [True]
    hub.ended(range(10, 10 + RECENT))  # the oldest are forgotten, the newest kept
    assert not hub.ended_lately(1) and hub.ended_lately(10 + RECENT - 1)
    assert len(hub._recent_set) == RECENT  # bounded memory


def test_closing_a_doorbell_wakes_its_receiver_at_once_not_at_its_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from engine.store import doorbell

    # a receive timeout no test would wait out: a close that waits for it fails the bound
    monkeypatch.setattr(doorbell, "RECEIVE_TIMEOUT", 30.0)
    bell = Doorbell(str(tmp_path / "e.db"))
    bell.listen(lambda note: None)
    thread = bell._thread
    assert thread is not None and thread.is_alive()
    started = time.monotonic()
    bell.close()
    assert time.monotonic() - started < 5.0  # `encore send --wait` exits with its answer
    assert not thread.is_alive()
