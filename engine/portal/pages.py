"""The portal's pages (docs/portal.md): server-rendered, readable without JavaScript. Reads are
plain ``def`` endpoints so the store's blocking calls run in the thread pool."""
from __future__ import annotations

import math
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from engine.errors import MessageNotFound, OperatorError
from engine.portal import actions, filters
from engine.portal.auth import LOGIN_COOKIE, SESSION_COOKIE, SESSION_MAX_AGE, check_csrf
from engine.portal.context import portal_of
from engine.portal.diagram import layout
from engine.portal.forms import acting_user, confirm, confirmed, current_user, field
from engine.portal.status import production_view
from engine.portal.trace_view import session_trace
from engine.portal.viewer_page import messages_context
from engine.serving.auth import AuthError, LoginThrottled, NotAuthenticated
from engine.store import operator, viewer
from engine.store.models import EVENT_TYPES


def routes() -> list[BaseRoute]:
    return [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout_form, methods=["GET"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", production, methods=["GET"]),
        Route("/messages", messages, methods=["GET"]),
        Route("/messages/resend", bulk_resend_form, methods=["GET"]),
        Route("/messages/resend", bulk_resend, methods=["POST"]),
        Route("/messages/{message_id:int}", message, methods=["GET"]),
        Route("/messages/{message_id:int}/{action}", message_action, methods=["POST"]),
        Route("/trace/{session_id:int}", trace, methods=["GET"]),
        Route("/events", events, methods=["GET"]),
        Route("/suspended", suspended, methods=["GET"]),
        Route("/items/{name}/{action}", item_action, methods=["POST"]),
    ]


# -- login -------------------------------------------------------------------------------
def login_form(request: Request, *, error: str = "", status: int = 200) -> Response:
    portal = portal_of(request)
    if not error and portal.auth.session_user(request.cookies.get(SESSION_COOKIE)):
        return RedirectResponse(_next(request.query_params.get("next")), status_code=303)
    token, cookie = portal.auth.login_form_token()
    response = portal.render(request, "login.html",
                             {"login_csrf": token, "error": error,
                              "next": _next(request.query_params.get("next"))},
                             user=None, status_code=status)
    response.set_cookie(LOGIN_COOKIE, cookie, max_age=3600, httponly=True, samesite="strict",
                        secure=portal.tls, path="/login")
    return response


async def login(request: Request) -> Response:
    portal = portal_of(request)
    form = await request.form()
    client = request.client.host if request.client else "?"
    try:
        portal.auth.check_login_form(request.cookies.get(LOGIN_COOKIE), field(form, "csrf_token"))
        user = await run_in_threadpool(portal.auth.login, field(form, "username"),
                                       field(form, "password"), client)
    except LoginThrottled as exc:  # LoginBusy too: no slot to check the password in
        refused = login_form(request, error=str(exc), status=429)
        refused.headers["Retry-After"] = str(math.ceil(exc.retry_after) or 1)
        return refused
    except AuthError as exc:
        status = 401 if isinstance(exc, NotAuthenticated) else 403
        return login_form(request, error=str(exc), status=status)
    response = RedirectResponse(_next(field(form, "next")), status_code=303)
    response.set_cookie(SESSION_COOKIE, portal.auth.session_cookie(user),
                        max_age=SESSION_MAX_AGE, httponly=True, samesite="strict",
                        secure=portal.tls, path="/")
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response


def logout_form(request: Request) -> Response:
    """A GET logs nobody out (a link or an image on another page could send one): it asks,
    with a form that posts the session's CSRF token."""
    user = current_user(request)
    return portal_of(request).render(request, "confirm.html", {
        "question": f"Log {user.name} out? Your sessions end on every device.",
        "action": "/logout"}, user=user)


async def logout(request: Request) -> Response:
    """End the user's sessions (every one of theirs, on every portal), with the session's
    CSRF token; without a valid session there is nothing to end."""
    portal = portal_of(request)
    form = await request.form()
    user = await run_in_threadpool(portal.auth.session_user,
                                   request.cookies.get(SESSION_COOKIE))
    if user is not None:
        request.state.user = user
        check_csrf(user, field(form, "csrf_token"))
        await run_in_threadpool(portal.auth.logout, user)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict",
                           secure=portal.tls)
    return response


def _next(target: str | None) -> str:
    """Where to go after logging in: a path of this site only."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


# -- reading -----------------------------------------------------------------------------
def production(request: Request) -> Response:
    user = current_user(request)
    portal = portal_of(request)
    template = "_production.html" if request.query_params.get("fragment") else "production.html"
    view = production_view(portal)
    return portal.render(request, template, {**view, "diagram": layout(view["items"])},
                         user=user)


def messages(request: Request) -> Response:
    user = current_user(request)
    portal = portal_of(request)
    return portal.render(request, "messages.html",
                         messages_context(portal, request.query_params, user), user=user)


def message(request: Request) -> Response:
    user = current_user(request)
    portal = portal_of(request)
    message_id = request.path_params["message_id"]
    row = viewer.message(portal.store, message_id)
    if row is None:
        raise MessageNotFound(f"message {message_id} does not exist")
    related_id = row["corresponding_id"]
    related = viewer.message(portal.store, related_id) if related_id else None
    return portal.render(request, "message.html", {
        "m": row, "related": related,
        "attempts": viewer.attempts_of(portal.store, [message_id])[message_id],
        "events": viewer.events_of(portal.store, [message_id]),
        "allowed": _allowed_actions(row)}, user=user)


def _allowed_actions(row: dict[str, Any]) -> list[str]:
    if row["kind"] != "request":
        return []
    allowed = {"resend": operator.RESENDABLE_STATUSES,
               "suspend": operator.SUSPENDABLE_STATUSES,
               "discard": operator.DISCARDABLE_STATUSES}
    return [action for action, statuses in allowed.items() if row["status"] in statuses]


def trace(request: Request) -> Response:
    user = current_user(request)
    portal = portal_of(request)
    page = request.query_params.get("page", "1")
    if not page.isdigit() or len(page) > 9:
        raise filters.FilterError(f"page: {page!r} is not a page number")
    view = session_trace(portal.store, request.path_params["session_id"], int(page))
    return portal.render(request, "trace.html", view, user=user)


def events(request: Request) -> Response:
    user = current_user(request)
    portal = portal_of(request)
    params = request.query_params
    flt = filters.event_filter(params)
    page = viewer.events_page(portal.store, flt, **filters.cursor(params))
    kept = filters.kept(params, filters.EVENT_PARAMS)
    context = {"page": page, "params": kept, "items": portal.items, "types": EVENT_TYPES,
               "follow": params.get("follow") == "1",
               "older": filters.link("/events", kept, before=page.older) if page.older else None,
               "newer": filters.link("/events", kept, after=page.newer) if page.newer else None,
               "rows_link": filters.link("/events", kept, fragment=1)}
    template = "_event_rows.html" if params.get("fragment") else "events.html"
    return portal.render(request, template, context, user=user)


def suspended(request: Request) -> Response:
    user = current_user(request)
    portal = portal_of(request)
    item = request.query_params.get("item") or None
    rows = operator.suspended_messages(portal.store, item=item)
    return portal.render(request, "suspended.html", {"rows": rows, "item": item}, user=user)


# -- actions -----------------------------------------------------------------------------
async def message_action(request: Request) -> Response:
    user, form = await acting_user(request)
    portal = portal_of(request)
    message_id, action = request.path_params["message_id"], request.path_params["action"]
    if action not in actions.MESSAGE_ACTIONS:
        raise HTTPException(404, f"no action {action!r}")
    if not confirmed(form):
        return confirm(request, portal, user, f"{action.capitalize()} message {message_id}?",
                        request.url.path)
    shown = await run_in_threadpool(actions.act_on_message, portal.store, portal.items, user,
                                    action, message_id)
    return RedirectResponse(f"/messages/{shown}", status_code=303)


async def item_action(request: Request) -> Response:
    user, form = await acting_user(request)
    portal = portal_of(request)
    name, action = request.path_params["name"], request.path_params["action"]
    if action not in ("enable", "disable"):
        raise HTTPException(404, f"no action {action!r}; expected enable or disable")
    if not confirmed(form):
        return confirm(request, portal, user, f"{action.capitalize()} item {name}?",
                        request.url.path)
    await run_in_threadpool(actions.set_item_enabled, portal.store, portal.items, user, name,
                            action == "enable")
    return RedirectResponse("/", status_code=303)


def bulk_resend_form(request: Request) -> Response:
    user = current_user(request, "operator")
    portal = portal_of(request)
    params = request.query_params
    flt = filters.message_filter(params)
    kept = filters.kept(params, filters.MESSAGE_PARAMS)
    return portal.render(request, "bulk_resend.html", {
        "params": kept, "count": viewer.count_messages(portal.store, flt, resendable=True),
        "limit": actions.BULK_RESEND_LIMIT, "back": filters.link("/messages", kept)}, user=user)


async def bulk_resend(request: Request) -> Response:
    user, form = await acting_user(request)
    portal = portal_of(request)
    params = {name: field(form, name) for name in filters.MESSAGE_PARAMS}
    flt = filters.message_filter(params)
    typed = field(form, "count").strip()
    if not typed.isdigit():
        raise OperatorError("type the number of messages to resend, to confirm")
    new_ids = await run_in_threadpool(actions.bulk_resend, portal.store, portal.items, user,
                                      flt, int(typed))
    return portal.render(request, "bulk_done.html", {
        "new_ids": new_ids, "back": filters.link("/messages", filters.kept(
            params, filters.MESSAGE_PARAMS))}, user=user)


