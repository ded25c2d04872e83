"""A portal follows the production it serves (docs/portal.md, "what runs is what is shown").

:class:`ProductionFollower` reloads the file when a daemon announces a reload, and for a
standalone portal when the file changes; a file that no longer loads is not taken.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from engine.config.production import load_production
from engine.store import running
from engine.store.notify import Announcement, Kind

if TYPE_CHECKING:
    from engine.portal.context import Portal

log = logging.getLogger(__name__)

WATCH_INTERVAL = 0.5  # seconds between looks at the production file's mtime and size


class ProductionFollower:
    """Keeps ``portal.production`` what the production file says (see the module doc)."""

    def __init__(self, portal: Portal, env: Mapping[str, str], *, poll_file: bool) -> None:
        self.portal = portal
        self.env = dict(env)
        self.poll_file = poll_file
        self.path = portal.production.path
        self._lock = threading.Lock()
        self._stat = self._stat_now()
        self._hash = running.file_hash(*portal.production.files)
        self._refused: str | None = None  # hash of a version that would not load
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.path is None:
            return
        store = self.portal.store
        store.add_queue_callback(self._heard)
        if self.poll_file:  # standalone: hear the daemons (inside one, the daemon hears)
            store.hear_other_processes()
            self._thread = threading.Thread(target=self._watch, daemon=True,
                                            name="portal-production-watch")
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.path is not None:
            self.portal.store.remove_queue_callback(self._heard)

    def _heard(self, note: Announcement) -> None:
        if note.kind is Kind.RELOADED:
            self.reload(force=True)

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL):
            if self._stat_now() != self._stat:
                self.reload()

    def _stat_now(self) -> tuple[tuple[int, int], ...] | None:
        try:
            infos = [os.stat(p) for p in self.portal.production.files]
        except OSError:
            return None
        return tuple((info.st_mtime_ns, info.st_size) for info in infos) or None

    def reload(self, *, force: bool = False) -> bool:
        """Load the file again if it changed (``force``: if it differs from what is served,
        by hash); True when the portal now serves a new version."""
        with self._lock:
            self._stat = self._stat_now()
            files = self.portal.production.files
            digest = running.file_hash(*files)
            if digest is None or digest == self._hash or (digest == self._refused and
                                                          not force):
                return False
            try:
                new = load_production(self.path, self.env)  # type: ignore[arg-type]
            except Exception as exc:  # a bad file never takes the portal down
                if digest != self._refused:
                    log.warning("portal: the production file changed but does not load; "
                                "serving the previous version: %s", exc)
                self._refused = digest
                return False
            if new.files != files:  # another defaults file
                digest = running.file_hash(*new.files)
            self.portal.production = new
            self._hash, self._refused = digest, None
            log.info("portal: production file reloaded: %d item(s)", len(new.items))
            return True
