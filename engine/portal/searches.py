"""Saved searches of the Message Viewer (docs/portal.md): each user's named query strings.
Saving one is not an operator action and writes no event."""
from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from engine.clock import utcnow
from engine.portal import filters
from engine.portal.auth import check_csrf
from engine.portal.context import portal_of
from engine.portal.forms import current_user, field
from engine.store import searches


def routes() -> list[BaseRoute]:
    return [Route("/searches", save, methods=["POST"]),
            Route("/searches/{search_id:int}/delete", delete, methods=["POST"])]


async def save(request: Request) -> Response:
    """Save the viewer's current query (the form's ``query``) as ``name``."""
    form = await request.form()
    user = await run_in_threadpool(current_user, request)
    check_csrf(user, field(form, "csrf_token"))
    params = dict(parse_qsl(field(form, "query"), keep_blank_values=False))
    portal = portal_of(request)
    filters.message_filter(params)  # a query that does not parse is refused, as it would be
    kept = urlencode(filters.message_params(params))
    await run_in_threadpool(searches.save_search, portal.store, user.name, field(form, "name"),
                            kept, now=utcnow())
    return RedirectResponse(f"/messages?{kept}" if kept else "/messages", status_code=303)


async def delete(request: Request) -> Response:
    form = await request.form()
    user = await run_in_threadpool(current_user, request)
    check_csrf(user, field(form, "csrf_token"))
    await run_in_threadpool(searches.delete_search, portal_of(request).store, user.name,
                            request.path_params["search_id"])
    return RedirectResponse("/messages", status_code=303)
