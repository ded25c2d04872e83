"""What the Message Viewer page shows (docs/portal.md): a page of messages for the
filters, sort and order of the query, with the links that keep them — paging, sorting by a
column, exports of the same filter — and the user's saved searches."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from engine.portal import filters
from engine.portal.context import Portal
from engine.portal.export import declared_properties
from engine.serving.auth import Principal
from engine.store import searches, viewer
from engine.store.models import MESSAGE_STATUSES

SORT_COLUMNS = {"created": "time", "target": "target", "status": "status",
                "duration": "duration"}  # column heading → sort


def messages_context(portal: Portal, params: Mapping[str, str],
                     user: Principal) -> dict[str, Any]:
    declared = declared_properties(portal.production)
    flt = filters.message_filter(params, declared)
    page = viewer.messages_page(portal.store, flt, **filters.cursor(params))
    kept = filters.message_params(params)
    query = urlencode(kept)
    return {
        "page": page, "params": kept, "query": query, "items": portal.items,
        "statuses": MESSAGE_STATUSES, "declared": sorted(declared),
        "props": [(p.path, p.op, p.value) for p in flt.props], "body_filters": flt.body,
        "sort": flt.sort, "order": "desc" if flt.descending else "asc",
        "sort_links": {column: _sort_link(kept, sort, flt)
                       for column, sort in SORT_COLUMNS.items()},
        "older": filters.link("/messages", kept, before=page.older) if page.older else None,
        "newer": filters.link("/messages", kept, after=page.newer) if page.newer else None,
        # a bulk resend carries the plain filters only: none when prop./body. ones are set
        "bulk_link": (None if flt.props or flt.body
                      else filters.link("/messages/resend", filters.kept(
                          params, filters.MESSAGE_PARAMS))),
        "export_csv": f"/messages.csv?{query}" if query else "/messages.csv",
        "export_jsonl": f"/messages.jsonl?{query}" if query else "/messages.jsonl",
        "saved": searches.saved_searches(portal.store, user.name),
    }


def _sort_link(kept: Mapping[str, str], sort: str, flt: viewer.MessageFilter) -> str:
    """The link that sorts by ``sort`` (again: the other way round)."""
    order = "asc" if flt.sort == sort and flt.descending else "desc"
    params = {k: v for k, v in kept.items() if k not in ("sort", "order")}
    return filters.link("/messages", params, sort=sort, order=order)
