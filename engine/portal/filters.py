"""Query parameters of the Message Viewer and the event log, for pages and API alike
(docs/portal.md); a value that does not parse is a :class:`FilterError`, an empty one absent."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import TypedDict
from urllib.parse import urlencode

from engine.clock import utcnow
from engine.errors import EncoreError
from engine.store.models import EVENT_TYPES, MESSAGE_STATUSES
from engine.store.properties import PATH_PATTERN
from engine.store.viewer import PAGE_SIZE, SORTS, EventFilter, MessageFilter, PropertyFilter

MESSAGE_PARAMS = ("target", "status", "session", "since", "until", "q", "errors", "source",
                  "sort", "order")
PROP_PREFIX, BODY_PREFIX = "prop.", "body."
RANGE_OPS = ("gt", "lt")  # prop.PATH.gt / prop.PATH.lt
MAX_VALUE = 200  # characters of a prop. or body. value
MAX_QUERY = 400  # characters of q: a longer text search costs the database, finds nothing more
EVENT_PARAMS = ("type", "item", "message", "since", "lifecycle")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class FilterError(EncoreError):
    """A query parameter that does not parse (HTTP 400)."""


def message_filter(params: Mapping[str, str],
                   declared: Collection[str] | None = None) -> MessageFilter:
    """The Message Viewer's filter from query parameters. ``declared``: the search
    properties the production's items declare (None: not checked); a ``prop.`` filter on
    another path is refused, naming those that exist."""
    status = _text(params, "status")
    if status is not None and status not in MESSAGE_STATUSES:
        raise FilterError(f"status: {status!r} is not one of {', '.join(MESSAGE_STATUSES)}")
    sort = _text(params, "sort") or "time"
    if sort not in SORTS:
        raise FilterError(f"sort: {sort!r} is not one of {', '.join(SORTS)}")
    order = _text(params, "order") or "desc"
    if order not in ("asc", "desc"):
        raise FilterError(f"order: {order!r} is not asc or desc")
    return MessageFilter(target=_text(params, "target"), status=status,
                         session_id=_int(params, "session"), since=_time(params, "since"),
                         until=_time(params, "until"), q=_query(params),
                         errors=_text(params, "errors") in ("1", "true", "on", "yes"),
                         source=_text(params, "source"),
                         props=property_filters(params, declared), body=body_filters(params),
                         sort=sort, descending=order == "desc")


def property_filters(params: Mapping[str, str],
                     declared: Collection[str] | None = None) -> tuple[PropertyFilter, ...]:
    """``prop.PATH=V``, ``prop.PATH.gt=V``, ``prop.PATH.lt=V`` (a trailing ``.gt``/``.lt``
    is the operator, not part of the path)."""
    found = []
    for name, value in _prefixed(params, PROP_PREFIX):
        path, _, op = name.rpartition(".")
        if op not in RANGE_OPS:
            path, op = name, "eq"
        _check_path(PROP_PREFIX + name, path)
        if declared is not None and path not in declared:
            known = ", ".join(sorted(declared)) or "none (set search_properties on an item)"
            raise FilterError(f"{PROP_PREFIX}{name}: {path!r} is not a search property of any "
                              f"item; the search properties are: {known} (body.{path}= "
                              "searches any body, without an index)")
        found.append(PropertyFilter(path, op, value))
    return tuple(found)


def body_filters(params: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``body.PATH=V``: the value at PATH in the body, as text, is V (the viewer's form
    sends it as ``body_path=PATH&body_value=V``)."""
    found = []
    for path, value in [*_prefixed(params, BODY_PREFIX), *_form_pair(params)]:
        _check_path(BODY_PREFIX + path, path)
        found.append((path, value))
    return tuple(found)


def message_params(params: Mapping[str, str]) -> dict[str, str]:
    """The Message Viewer's non-empty parameters (``prop.``/``body.`` ones too), to carry
    over into links, forms, exports and saved searches."""
    kept_ = kept(params, MESSAGE_PARAMS)
    kept_.update({key: params[key].strip() for key in params
                  if key.startswith((PROP_PREFIX, BODY_PREFIX)) and params[key].strip()})
    kept_.update({BODY_PREFIX + path: value for path, value in _form_pair(params)})
    return kept_


def _form_pair(params: Mapping[str, str]) -> list[tuple[str, str]]:
    path, value = _text(params, "body_path"), _text(params, "body_value")
    return [(path, value)] if path and value else []


def _prefixed(params: Mapping[str, str], prefix: str) -> list[tuple[str, str]]:
    out = []
    for key in sorted(k for k in params if k.startswith(prefix)):
        value = params[key].strip()
        if not value:
            continue
        if len(value) > MAX_VALUE:
            raise FilterError(f"{key}: the value is longer than {MAX_VALUE} characters")
        out.append((key[len(prefix):], value))
    return out


def _check_path(name: str, path: str) -> None:
    if not PATH_PATTERN.fullmatch(path):
        raise FilterError(f"{name}: {path!r} is not a dotted path into the body, such as "
                          "order or customer.id")


def event_filter(params: Mapping[str, str]) -> EventFilter:
    """The event log's filter from query parameters (``lifecycle=1``: only the production's
    life)."""
    type_ = _text(params, "type")
    if type_ is not None and type_ not in EVENT_TYPES:
        raise FilterError(f"type: {type_!r} is not one of {', '.join(EVENT_TYPES)}")
    return EventFilter(type=type_, item=_text(params, "item"),
                       message_id=_int(params, "message"), since=_time(params, "since"),
                       lifecycle=_text(params, "lifecycle") in ("1", "true", "on", "yes"))


class Cursor(TypedDict):
    """Where a page starts (the keywords of the viewer's page readers)."""

    before: int | None
    after: int | None
    limit: int


def cursor(params: Mapping[str, str]) -> Cursor:
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


def _query(params: Mapping[str, str]) -> str | None:
    value = _text(params, "q")
    if value is not None and len(value) > MAX_QUERY:
        raise FilterError(f"q: the search text is {len(value):,} characters long; at most "
                          f"{MAX_QUERY} are searched for (search properties, prop.PATH=V, "
                          "find one message among millions by index)")
    return value


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
