"""Export of the Message Viewer and the event log as CSV or JSON lines (docs/portal.md),
streamed in keyset chunks: never in memory, no transaction open while the client reads."""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from engine.clock import utcnow
from engine.portal import filters
from engine.portal.context import portal_of
from engine.portal.forms import current_user
from engine.store import viewer
from engine.store.sql import SqlStore
from engine.store.statuses import Status

FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
MESSAGE_COLUMNS = ("id", "session_id", "time_created", "time_completed", "duration_ms",
                   "source", "target", "kind", "status", "attempts", "retry_needed",
                   "error_text", "corresponding_id")
EVENT_COLUMNS = ("id", "time_logged", "type", "config_name", "job", "message_id",
                 "session_id", "source_class", "source_method", "text")
ROWS_PER_WRITE = 200  # rows joined into one chunk of the response body


def routes() -> list[BaseRoute]:
    return [Route("/messages.{fmt:str}", messages_file, methods=["GET"]),
            Route("/events.{fmt:str}", events_file, methods=["GET"])]


# -- pages -------------------------------------------------------------------------------
def messages_file(request: Request) -> Response:
    current_user(request)
    return messages_export(request, request.path_params["fmt"])


def events_file(request: Request) -> Response:
    current_user(request)
    return events_export(request, request.path_params["fmt"])


# -- the exports (pages and API) ---------------------------------------------------------
def messages_export(request: Request, fmt: str) -> Response:
    """Every message the request's filter selects, streamed as ``fmt``."""
    _check_format(fmt)
    portal = portal_of(request)
    params = request.query_params
    flt = filters.message_filter(params, declared_properties(portal.production))
    with_body = params.get("body") in ("1", "true", "yes")
    return _stream(message_lines(portal.store, flt, fmt, body=with_body), fmt, "messages")


def events_export(request: Request, fmt: str) -> Response:
    """Every event the request's filter selects, streamed as ``fmt``."""
    _check_format(fmt)
    portal = portal_of(request)
    rows = viewer.iter_events(portal.store, filters.event_filter(request.query_params))
    writer = csv_lines if fmt == "csv" else json_lines
    return _stream(writer(rows, EVENT_COLUMNS), fmt, "events")


def declared_properties(production: Any) -> set[str]:
    """Every search property an item of ``production`` declares."""
    return {path for item in production.items
            for path in (item.settings.get("search_properties") or ())}


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise filters.FilterError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")


def _stream(chunks: Iterator[str], fmt: str, what: str) -> StreamingResponse:
    stamp = utcnow().strftime("%Y%m%dT%H%M%SZ")
    return StreamingResponse(chunks, media_type=FORMATS[fmt], headers={
        "content-disposition": f'attachment; filename="encore-{what}-{stamp}.{fmt}"'})


def message_lines(store: SqlStore, flt: viewer.MessageFilter, fmt: str, *,
                  body: bool = False) -> Iterator[str]:
    """The export of every message ``flt`` selects as ``fmt`` text chunks."""
    columns = (*MESSAGE_COLUMNS, "body") if body else MESSAGE_COLUMNS
    rows = (_message_record(row) for row in viewer.export_rows(store, flt, body=body))
    if fmt == "csv":
        return _csv_records(rows, columns)
    return json_lines((dict(zip(columns, r)) for r in rows), columns)


_CREATED, _COMPLETED = (viewer.EXPORT_COLUMNS.index(c) for c in ("time_created",
                                                                  "time_completed"))
_STATUS = viewer.EXPORT_COLUMNS.index("status")


def _message_record(row: list[Any]) -> list[Any]:
    """An export row in MESSAGE_COLUMNS order (the duration after the times)."""
    created, completed = row[_CREATED], row[_COMPLETED]
    duration = (None if created is None or completed is None or row[_STATUS] == Status.SUSPENDED
                else round((completed - created).total_seconds() * 1000, 1))
    return [*row[:_CREATED], created, completed, duration, *row[_COMPLETED + 1:]]


def _csv_records(records: Iterable[list[Any]], columns: tuple[str, ...]) -> Iterator[str]:
    """A header line, then one CSV record per row of MESSAGE_COLUMNS values, in chunks."""
    buffer = io.StringIO()
    out = csv.writer(buffer, lineterminator="\r\n")
    out.writerow(columns)
    created, completed = columns.index("time_created"), columns.index("time_completed")
    retry = columns.index("retry_needed")
    count = 0
    for record in records:
        record[created] = _time_cell(record[created])
        record[completed] = _time_cell(record[completed])
        record[retry] = _bool_cell(record[retry])
        out.writerow(record)
        count += 1
        if count % ROWS_PER_WRITE == 0:
            yield _drain(buffer)
    yield _drain(buffer)


def csv_lines(rows: Iterable[Mapping[str, Any]], columns: tuple[str, ...]) -> Iterator[str]:
    """A header line, then one CSV record per row (times in ISO 8601, UTC; true/false;
    nothing for null), in chunks."""
    buffer = io.StringIO()
    out = csv.writer(buffer, lineterminator="\r\n")
    out.writerow(columns)
    cells = [_CELLS.get(c) for c in columns]
    count = 0
    for row in rows:
        out.writerow([row.get(c) if cell is None else cell(row.get(c))
                      for c, cell in zip(columns, cells)])
        count += 1
        if count % ROWS_PER_WRITE == 0:
            yield _drain(buffer)
    yield _drain(buffer)


def json_lines(rows: Iterable[Mapping[str, Any]], columns: tuple[str, ...]) -> Iterator[str]:
    """One JSON object per line and row, in chunks."""
    chunk: list[str] = []
    for row in rows:
        chunk.append(json.dumps({c: _value(row.get(c)) for c in columns}))  # ASCII: any text
        if len(chunk) >= ROWS_PER_WRITE:
            yield "\n".join(chunk) + "\n"
            chunk = []
    if chunk:
        yield "\n".join(chunk) + "\n"


def _drain(buffer: io.StringIO) -> str:
    """The text written so far (a lone surrogate, which UTF-8 cannot carry, as its escape)."""
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return value


def _time_cell(value: datetime | None) -> str:
    return "" if value is None else _value(value)


def _bool_cell(value: bool | None) -> str:
    return "" if value is None else "true" if value else "false"


# columns whose CSV cell is not the value as csv writes it (None is written as nothing)
_CELLS: dict[str, Callable[[Any], str]] = {"time_created": _time_cell, "time_completed": _time_cell,
                                          "time_logged": _time_cell,
                                          "retry_needed": _bool_cell}
