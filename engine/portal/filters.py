"""Query parameters of the Message Viewer and the event log, for pages and API alike.

Parameters are the interface (DESIGN.md §9): ``target``, ``status``, ``session``, ``since``,
``until``, ``q``, ``errors=1`` for messages; ``type``, ``item``, ``message``, ``since`` for
events; ``before``/``after`` (ids) and ``limit`` for paging. A value that does not parse is a
:class:`FilterError` that names the parameter; an empty value counts as absent.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from urllib.parse import urlencode

from engine.clock import utcnow
from engine.errors import EncoreError
from engine.store.models import EVENT_TYPES, MESSAGE_STATUSES
from engine.store.viewer import PAGE_SIZE, EventFilter, MessageFilter

MESSAGE_PARAMS = ("target", "status", "session", "since", "until", "q", "errors")
EVENT_PARAMS = ("type", "item", "message", "since")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class FilterError(EncoreError):
    """A query parameter that does not parse (HTTP 400)."""


def message_filter(params: Mapping[str, str]) -> MessageFilter:
    """The Message Viewer's filter from query parameters."""
    status = _text(params, "status")
    if status is not None and status not in MESSAGE_STATUSES:
        raise FilterError(f"status: {status!r} is not one of {', '.join(MESSAGE_STATUSES)}")
    return MessageFilter(target=_text(params, "target"), status=status,
                         session_id=_int(params, "session"), since=_time(params, "since"),
                         until=_time(params, "until"), q=_text(params, "q"),
                         errors=_text(params, "errors") in ("1", "true", "on", "yes"))


def event_filter(params: Mapping[str, str]) -> EventFilter:
    """The event log's filter from query parameters."""
    type_ = _text(params, "type")
    if type_ is not None and type_ not in EVENT_TYPES:
        raise FilterError(f"type: {type_!r} is not one of {', '.join(EVENT_TYPES)}")
    return EventFilter(type=type_, item=_text(params, "item"),
                       message_id=_int(params, "message"), since=_time(params, "since"))


def cursor(params: Mapping[str, str]) -> dict[str, int | None]:
    """``before``, ``after`` and ``limit`` (default :data:`PAGE_SIZE`) for a page."""
    limit = _int(params, "limit")
    return {"before": _int(params, "before"), "after": _int(params, "after"),
            "limit": PAGE_SIZE if limit is None else limit}


def kept(params: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """The non-empty parameters among ``names``, to carry over into links and forms."""
    return {name: params[name] for name in names if params.get(name, "").strip()}


def link(path: str, params: Mapping[str, str | int], **more: str | int | None) -> str:
    """``path`` with ``params`` and ``more`` (None values left out) as its query."""
    query = {**params, **{k: v for k, v in more.items() if v is not None}}
    return f"{path}?{urlencode(query)}" if query else path


def parse_time(text: str, name: str) -> datetime:
    """``10m``, ``2h``, ``3d``, ``45s`` ago, or an ISO time (UTC if it names no zone)."""
    text = text.strip()
    unit = _UNITS.get(text[-1:])
    if unit is not None and text[:-1].replace(".", "", 1).isdigit():
        return utcnow() - timedelta(seconds=float(text[:-1]) * unit)
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise FilterError(f"{name}: {text!r} is not a time; use 10m, 2h, 3d or an ISO time "
                          "such as 2026-11-30T08:00") from exc
    return value if value.tzinfo else value.replace(tzinfo=utcnow().tzinfo)


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name, "").strip()
    return value or None


def _int(params: Mapping[str, str], name: str) -> int | None:
    value = _text(params, name)
    if value is None:
        return None
    if not value.isdigit() or len(value) > 18:
        raise FilterError(f"{name}: {value!r} is not a whole number")
    return int(value)


def _time(params: Mapping[str, str], name: str) -> datetime | None:
    value = _text(params, name)
    return None if value is None else parse_time(value, name)
