"""The limit of HTTP intake on SQLite (issue 21, ``bare_intake_http_msgs_per_s``): a bare
Starlette app under uvicorn whose ``POST /api/v1/messages/{target}`` does one durable SQLite
insert of the body — WAL, ``synchronous=FULL``, one commit per request — and answers 202
with the new row's id once it is committed.

It parses the body as JSON (400 if it is not) and does nothing else: no token, no
validation against a message class, no idempotency key. One connection, used by one
thread-pool thread at a time (a lock), so requests wait for each other on the lock, not in
SQLite's busy handler. uvicorn runs with the portal's settings (``engine.portal.server``):
one process, no access log, no lifespan.

    python -m bench.bare_intake --db FILE --port PORT
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SCHEMA = ("CREATE TABLE IF NOT EXISTS message (id INTEGER PRIMARY KEY, target TEXT NOT NULL, "
          "body TEXT NOT NULL, time_created REAL NOT NULL)")


class Store:
    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(SCHEMA)
        self.lock = threading.Lock()

    def insert(self, target: str, body: str) -> int:
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                cursor = self.conn.execute(
                    "INSERT INTO message (target, body, time_created) VALUES (?, ?, ?)",
                    (target, body, time.time()))
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            return int(cursor.lastrowid or 0)


def create_app(path: str) -> Starlette:
    store = Store(path)

    async def intake(request: Request) -> Response:
        text = (await request.body()).decode("utf-8")
        try:
            json.loads(text)
        except ValueError:
            return JSONResponse({"error": "not JSON"}, status_code=400)
        new_id = await run_in_threadpool(store.insert, request.path_params["target"], text)
        return JSONResponse({"id": new_id}, status_code=202)

    async def ping(request: Request) -> Response:
        return Response("ok")

    return Starlette(routes=[Route("/api/v1/messages/{target}", intake, methods=["POST"]),
                             Route("/ping", ping)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(create_app(args.db), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False, server_header=False, lifespan="off")


if __name__ == "__main__":
    main()
