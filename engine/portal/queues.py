"""The queues in the operator's console (docs/portal.md): every item's queue and one item's
queued messages in delivery order, keyset-paged by id."""
from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from engine.errors import ItemNotFound
from engine.portal import actions
from engine.portal.context import portal_of
from engine.portal.forms import acting_user, confirm, confirmed, current_user
from engine.portal.status import is_enabled, production_view
from engine.store import listings

PAGE_SIZE = 50
QUEUE_ACTIONS = ("suspend", "discard")


def routes() -> list[BaseRoute]:
    return [
        Route("/queues", queues_page, methods=["GET"]),
        Route("/queues/{name}", queue_page, methods=["GET"]),
        Route("/queues/{name}/{message_id:int}/{action}", queue_action, methods=["POST"]),
    ]


def queues_page(request: Request) -> Response:
    user = current_user(request)
    portal = portal_of(request)
    view = production_view(portal)
    return portal.render(request, "queues.html", {
        "items": [i for i in view["items"] if i["kind"] != "service"], "now": view["now"]},
        user=user)


def queue_page(request: Request) -> Response:
    user = current_user(request)
    portal = portal_of(request)
    name = request.path_params["name"]
    if name not in portal.items:
        raise ItemNotFound(f"no item named {name!r} in the production")
    after_text = request.query_params.get("after", "")
    if after_text and not after_text.isdigit():
        raise HTTPException(400, f"after: {after_text!r} is not a message id")
    after = int(after_text) if after_text else None
    rows, next_after = listings.queued_page(portal.store, name, after=after, limit=PAGE_SIZE)
    now = portal.store.db_now()
    return portal.render(request, "queue.html", {
        "name": name, "rows": rows, "after": after, "next_after": next_after,
        "position": 0 if after is None else None, "now": now,
        "enabled": is_enabled(portal.store, portal.production, name)}, user=user)


async def queue_action(request: Request) -> Response:
    user, form = await acting_user(request)
    portal = portal_of(request)
    name = request.path_params["name"]
    message_id, action = request.path_params["message_id"], request.path_params["action"]
    if action not in QUEUE_ACTIONS:
        raise HTTPException(404, f"no action {action!r}; expected suspend or discard")
    if not confirmed(form):
        return confirm(request, portal, user, f"{action.capitalize()} message {message_id} "
                        f"of {name}'s queue?", request.url.path)
    await run_in_threadpool(actions.act_on_message, portal.store, portal.items, user, action,
                            message_id)
    return RedirectResponse(f"/queues/{name}", status_code=303)
