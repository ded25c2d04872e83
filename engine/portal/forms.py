"""What every page module of the portal needs to serve a person: the session's user, the
user posting a form (its CSRF token checked before the role, so that a forged post learns
nothing), a form's fields, and the confirmation page an action asks for first."""
from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from engine.portal.auth import SESSION_COOKIE, check_csrf
from engine.portal.context import Portal, portal_of
from engine.serving.auth import NotAuthenticated, Principal

__all__ = ["acting_user", "confirm", "confirmed", "current_user", "field"]


def current_user(request: Request, role: str = "viewer") -> Principal:
    """The session's user, with at least ``role``; NotAuthenticated or Forbidden."""
    user = portal_of(request).auth.session_user(request.cookies.get(SESSION_COOKIE))
    if user is None:
        raise NotAuthenticated("log in first")
    request.state.user = user
    user.require(role)
    return user


async def acting_user(request: Request, role: str = "operator") -> tuple[Principal, FormData]:
    """The user of at least ``role`` posting a form with the session's CSRF token."""
    form = await request.form()
    user = await run_in_threadpool(current_user, request, "viewer")
    check_csrf(user, field(form, "csrf_token"))
    user.require(role)
    return user, form


def confirmed(form: FormData) -> bool:
    """The form says the user confirmed the action."""
    return field(form, "confirmed") == "yes"


def confirm(request: Request, portal: Portal, user: Principal, question: str,
            action: str) -> Response:
    """The page asking ``question`` before posting to ``action``."""
    return portal.render(request, "confirm.html", {"question": question, "action": action},
                         user=user)


def field(form: FormData, name: str) -> str:
    """A text field of ``form`` ('' when it is missing or a file)."""
    value = form.get(name)
    return value if isinstance(value, str) else ""
