"""The portal's administration (docs/portal.md): users, API tokens and the purge, for admins,
and each user's own account page. The CSRF token is checked before the role, so a forged
post learns nothing."""
from __future__ import annotations

from datetime import timedelta

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from engine.clock import utcnow
from engine.config.production import PortalConfig
from engine.errors import OperatorError
from engine.portal.actions import audit
from engine.portal.auth import check_csrf, check_password
from engine.portal.context import Portal, portal_of
from engine.portal.forms import confirm, confirmed, current_user, field
from engine.serving.auth import Principal, hash_password, new_token, token_digest
from engine.store import accounts, operator
from engine.store.models import TOKEN_ROLES, USER_ROLES

MAX_PURGE_DAYS = 36_500  # days: the longest age the purge form takes


def routes() -> list[BaseRoute]:
    return [
        Route("/admin", lambda request: RedirectResponse("/admin/users", 303), methods=["GET"]),
        Route("/admin/users", users_page, methods=["GET"]),
        Route("/admin/users", add_user, methods=["POST"]),
        Route("/admin/users/{name}/remove", remove_user, methods=["POST"]),
        Route("/admin/users/{name}/password", reset_password, methods=["POST"]),
        Route("/admin/tokens", tokens_page, methods=["GET"]),
        Route("/admin/tokens", create_token, methods=["POST"]),
        Route("/admin/tokens/{token_id:int}/revoke", revoke_token, methods=["POST"]),
        Route("/admin/purge", purge_page, methods=["GET"]),
        Route("/admin/purge", purge, methods=["POST"]),
        Route("/account", account_page, methods=["GET"]),
        Route("/account/time-zone", set_time_zone, methods=["POST"]),
    ]


# -- the password policy (engine.serving.auth.check_password) ----------------------------
def min_password_length(portal: Portal) -> int:
    return (portal.production.portal or PortalConfig.defaults()).password_min_length


# -- users -------------------------------------------------------------------------------
def users_page(request: Request, *, notice: str = "") -> Response:
    user, portal = _admin(request), portal_of(request)
    return portal.render(request, "admin_users.html", {
        "users": accounts.list_users(portal.store), "roles": USER_ROLES, "notice": notice,
        "min_length": min_password_length(portal)}, user=user)


async def add_user(request: Request) -> Response:
    user, form, portal = await _posting_admin(request)
    name, role = field(form, "name").strip(), field(form, "role")
    if not name:
        raise OperatorError("give the new user a name")
    check_password(field(form, "password"), min_password_length(portal))
    await run_in_threadpool(_add_user, portal, user, name, role, field(form, "password"))
    return RedirectResponse("/admin/users", status_code=303)


def _add_user(portal: Portal, who: Principal, name: str, role: str, password: str) -> None:
    accounts.add_user(portal.store, name, role, hash_password(password), now=utcnow())
    audit(portal.store, who, "user_add", f"portal user {name!r} added with role {role}")


async def remove_user(request: Request) -> Response:
    user, form, portal = await _posting_admin(request)
    name = request.path_params["name"]
    if name == user.name:
        raise OperatorError("you cannot remove yourself; another admin can")
    if not confirmed(form):
        return confirm(request, portal, user, f"Remove user {name}? Their sessions end.",
                        request.url.path)
    await run_in_threadpool(accounts.remove_user, portal.store, name)
    await run_in_threadpool(audit, portal.store, user, "user_remove",
                            f"portal user {name!r} removed")
    return RedirectResponse("/admin/users", status_code=303)


async def reset_password(request: Request) -> Response:
    user, form, portal = await _posting_admin(request)
    name, password = request.path_params["name"], field(form, "password")
    check_password(password, min_password_length(portal))
    await run_in_threadpool(accounts.reset_password, portal.store, name,
                            hash_password(password))
    await run_in_threadpool(audit, portal.store, user, "user_password",
                            f"password of portal user {name!r} reset (their sessions ended)")
    return RedirectResponse("/admin/users", status_code=303)


# -- tokens ------------------------------------------------------------------------------
def tokens_page(request: Request) -> Response:
    user, portal = _admin(request), portal_of(request)
    return portal.render(request, "admin_tokens.html", {
        "tokens": accounts.list_tokens(portal.store), "roles": TOKEN_ROLES}, user=user)


async def create_token(request: Request) -> Response:
    user, form, portal = await _posting_admin(request)
    name, role = field(form, "name").strip(), field(form, "role")
    if not name:
        raise OperatorError("name the token's holder")
    secret = new_token()
    token_id = await run_in_threadpool(_create_token, portal, user, name, role, secret)
    return portal.render(request, "admin_token_created.html", {
        "secret": secret, "name": name, "role": role, "token_id": token_id}, user=user)


def _create_token(portal: Portal, who: Principal, name: str, role: str, secret: str) -> int:
    token_id = accounts.add_token(portal.store, name, role, token_digest(secret), now=utcnow())
    audit(portal.store, who, "token_create",
          f"API token {token_id} created for {name!r} with role {role}")
    return token_id


async def revoke_token(request: Request) -> Response:
    user, form, portal = await _posting_admin(request)
    token_id = request.path_params["token_id"]
    if not confirmed(form):
        return confirm(request, portal, user, f"Revoke token {token_id}?", request.url.path)
    row = await run_in_threadpool(accounts.revoke_token, portal.store, token_id)
    await run_in_threadpool(audit, portal.store, user, "token_revoke",
                            f"API token {token_id} of {row.name!r} ({row.role}) revoked")
    return RedirectResponse("/admin/tokens", status_code=303)


# -- purge -------------------------------------------------------------------------------
def purge_page(request: Request) -> Response:
    """The purge form; with ``days``, what a purge would remove, and the button to do it."""
    user, portal = _admin(request), portal_of(request)
    days = _days(request.query_params.get("days", ""))
    counts = None if days is None else operator.purge(
        portal.store, timedelta(days=days), utcnow(), dry_run=True)
    return portal.render(request, "admin_purge.html", {"days": days, "counts": counts},
                         user=user)


async def purge(request: Request) -> Response:
    user, form, portal = await _posting_admin(request)
    days = _days(field(form, "days"))
    if days is None:
        raise OperatorError("give the age in days of the messages to purge")
    typed = field(form, "count").strip()
    counts = await run_in_threadpool(operator.purge, portal.store, timedelta(days=days),
                                     utcnow(), dry_run=True)
    if typed != str(counts.messages):
        raise OperatorError(f"a purge now removes {counts.messages} message(s), not "
                            f"{typed or 'the count you did not type'}; nothing was purged — "
                            "look again and type the count shown")
    done = await run_in_threadpool(operator.purge, portal.store, timedelta(days=days),
                                   utcnow())
    await run_in_threadpool(audit, portal.store, user, "purge",
                            f"purge of messages finished more than {days:g} day(s) ago: "
                            f"{done.messages} message(s), {done.attempts} attempt(s) and "
                            f"{done.events} event(s) removed")
    return portal.render(request, "admin_purge.html", {"days": days, "counts": None,
                                                       "done": done}, user=user)


def _days(text: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        days = float(text)
    except ValueError:
        raise OperatorError(f"days: {text!r} is not a number") from None
    if not 0 <= days <= MAX_PURGE_DAYS:
        raise OperatorError(f"days: {text} is out of range; from 0 to {MAX_PURGE_DAYS}")
    return days


# -- one's own account -------------------------------------------------------------------
def account_page(request: Request) -> Response:
    user, portal = current_user(request), portal_of(request)
    return portal.render(request, "account.html", {"zones": accounts.TIME_ZONES}, user=user)


async def set_time_zone(request: Request) -> Response:
    """Any user sets their own time zone (not an operator action: no event)."""
    form = await request.form()
    user = await run_in_threadpool(current_user, request)
    check_csrf(user, field(form, "csrf_token"))
    await run_in_threadpool(accounts.set_time_zone, portal_of(request).store, user.name,
                            field(form, "time_zone"))
    return RedirectResponse("/account", status_code=303)


# -- helpers -----------------------------------------------------------------------------
def _admin(request: Request) -> Principal:
    return current_user(request, "admin")


async def _posting_admin(request: Request) -> tuple[Principal, FormData, Portal]:
    """The admin posting a form with the session's CSRF token (checked before the role)."""
    form = await request.form()
    user = await run_in_threadpool(current_user, request, "viewer")
    check_csrf(user, field(form, "csrf_token"))
    user.require("admin")
    return user, form, portal_of(request)



