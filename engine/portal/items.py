"""One item in the operator's console (docs/portal.md): its page and API, restart, the
Testing Service and the admins' Reload. The page reads the production file, what the daemons
report and the per-minute rollup, never ``message_header`` at large, so its cost does not
grow with the messages.
"""
from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from adapters.urls import redact_userinfo
from engine.client import accept_message, decode_body
from engine.config.production import ItemConfig
from engine.config.rules import parse_rules
from engine.config.sources import shown_value
from engine.errors import MessageError
from engine.portal import actions
from engine.portal.api import api_user, reply
from engine.portal.context import Portal, portal_of
from engine.portal.example_body import example_body
from engine.portal.forms import acting_user, confirm, confirmed, current_user, field
from engine.portal.status import is_enabled, production_view_of_item
from engine.serving.auth import Principal
from engine.serving.intake import accept_and_wait
from engine.store import rollup
from engine.store.sql import Accepted
from engine.store.statuses import Status

TEST_WAIT = 30.0  # seconds the Testing Service waits for its message to end
MAX_TEST_BODY = 1024 * 1024  # characters of a test body
CHART_H, CHART_BAR = 90, 8  # px: the chart's height; one minute's bar, 60 of them


def routes() -> list[BaseRoute]:
    return [
        Route("/items/{name}", item_page, methods=["GET"]),
        Route("/items/{name}/restart", restart_form, methods=["POST"]),
        Route("/items/{name}/test", test_form, methods=["POST"]),
        Route("/production/reload", reload_form, methods=["POST"]),
        Route("/api/v1/items/{name}", item_api, methods=["GET"]),
        Route("/api/v1/items/{name}/restart", restart_api, methods=["POST"]),
        Route("/api/v1/items/{name}/test", test_api, methods=["POST"]),
        Route("/api/v1/production/reload", reload_api, methods=["POST"]),
    ]


# -- what the page shows -----------------------------------------------------------------
def item_view(portal: Portal, name: str) -> dict[str, Any]:
    """``GET /api/v1/items/{name}``'s answer (docs/portal.md), with what the page adds."""
    row = production_view_of_item(portal.store, portal.production, name)
    item = portal.production.item(name)
    now = portal.store.db_now()
    counts = rollup.item_rollup(portal.store, name, now=now)
    hour = counts.counters(counts.hour)
    return {
        "name": name, "class": item.class_path, "kind": row["kind"], "enabled": row["enabled"],
        "pool_size": item.pool_size,
        "settings": settings_of(portal, item),
        "target": target_of(item, row["running"]["servers"]),
        "daemons": row["running"]["daemons"], "state": row["light"], "why": row["why"],
        "refused": row["running"]["refused"], "failed": row["running"]["failed"],
        "operations": row["running"]["operations"],
        "queue": {k: row[k] for k in ("queued", "in_flight", "retrying", "oldest_wait")},
        "breaker": row["breaker"], "targets": row["targets"],
        "counters": {"1h": hour, "24h": counts.counters(counts.day)},
        "latency_ms": hour["latency_ms"],
        "per_minute": [{"minute": minute, "messages": m.counts["completed"]
                        + m.counts["give_ups"], "errors": m.failed}
                       for minute, m in counts.per_minute],
        "now": now,
    }


def settings_of(portal: Portal, item: ItemConfig) -> dict[str, dict[str, Any]]:
    """Every setting of ``item``: its value (secrets only by their credential name) and
    its source — ``file`` (its own name in the file), ``alias`` (a CamelCase name there),
    ``system default (defaults.toml, row N)`` or ``class default``."""
    shown: dict[str, dict[str, Any]] = {}
    for setting in item.cls.declared_settings():
        value = item.settings.get(setting.name, setting.default)
        source = item.sources.get(setting.name)
        if source is None:  # an item built in code, not loaded from a file: compare
            source = "class default" if value == setting.default else "file"
        shown[setting.name] = {"value": shown_value(setting.name, value), "source": source}
    return shown


def target_of(item: ItemConfig, servers: list[dict[str, Any]]) -> dict[str, Any]:
    """The adapter's target: URL, WSDL, and the servers with their bad marks (as the
    daemons running it report them; the file's list while none does)."""
    settings = item.settings
    url = settings.get("url") or ""
    wsdl = settings.get("wsdl") or ""
    if not servers:
        listed = settings.get("servers") or ([url] if url else [])
        servers = [{"url": s, "bad": None} for s in listed]
    return {"url": redact_userinfo(str(url)), "wsdl": redact_userinfo(str(wsdl)),
            "credentials": settings.get("credentials") or None,
            "servers": [{"url": redact_userinfo(str(s["url"])), "bad": s.get("bad")}
                        for s in servers]}


def chart(view: dict[str, Any], key: str) -> dict[str, Any]:
    """Bars of ``key`` (messages or errors) per minute of the last hour, for an SVG."""
    values = [m[key] for m in view["per_minute"]]
    top = max(values, default=0) or 1
    bars = [{"x": 30 + i * CHART_BAR, "h": round(v / top * (CHART_H - 20)), "v": v,
             "minute": m["minute"]} for i, (v, m) in enumerate(zip(values, view["per_minute"]))]
    return {"bars": bars, "top": max(values, default=0), "width": 30 + 60 * CHART_BAR + 10,
            "height": CHART_H, "base": CHART_H - 14, "total": sum(values)}


# -- pages -------------------------------------------------------------------------------
def item_page(request: Request, *, result: dict[str, Any] | None = None,
              body: str = "", status_code: int = 200) -> Response:
    user = current_user(request)
    portal = portal_of(request)
    view = item_view(portal, request.path_params["name"])
    return portal.render(request, "item.html", {
        "i": view, "messages_chart": chart(view, "messages"),
        "errors_chart": chart(view, "errors"), "result": result,
        "test_body": body or _example(portal, view), "operations": view["operations"],
        "takes_messages": _takes_messages(portal, view["name"])}, user=user,
        status_code=status_code)


def item_api(request: Request) -> Response:
    api_user(request, "viewer")
    view = item_view(portal_of(request), request.path_params["name"])
    return reply({k: v for k, v in view.items() if k != "per_minute"} |
                 {"per_minute": view["per_minute"][-60:]})


def _example(portal: Portal, view: dict[str, Any]) -> str:
    item = portal.production.item(view["name"])
    try:
        rules = parse_rules(item.settings.get("rules") or [])
    except ValueError:
        rules = ()  # refused at load: the daemons do not run it either
    return example_body(getattr(item.cls, "request_class", None), view["operations"], rules)


def _takes_messages(portal: Portal, name: str) -> bool:
    return getattr(portal.production.item(name).cls, "request_class", None) is not None


# -- restart -----------------------------------------------------------------------------
async def restart_form(request: Request) -> Response:
    user, form = await acting_user(request)
    portal = portal_of(request)
    name = request.path_params["name"]
    if not confirmed(form):
        return confirm(request, portal, user, f"Restart item {name} on every daemon running "
                        "it? Attempts in hand finish first.", request.url.path)
    await run_in_threadpool(actions.restart_item, portal.store, portal.production, user, name)
    return RedirectResponse(f"/items/{name}?restarted=1", status_code=303)


async def restart_api(request: Request) -> Response:
    who = await run_in_threadpool(api_user, request, "operator")
    portal = portal_of(request)
    name = request.path_params["name"]
    daemons = await run_in_threadpool(actions.restart_item, portal.store, portal.production,
                                      who, name)
    return reply({"item": name, "restarting_on": daemons}, 202)


# -- the Testing Service -----------------------------------------------------------------
async def test_form(request: Request) -> Response:
    user, form = await acting_user(request)
    portal = portal_of(request)
    name = request.path_params["name"]
    body = field(form, "body")
    try:
        if not confirmed(form):
            await run_in_threadpool(_refuse_disabled, portal, name)
            return _confirm_test(request, portal, user, name, body)
        result = await send_test(portal, user, name, body)
    except MessageError as exc:
        return item_page(request, result={"error": str(exc), "refused": True}, body=body,
                         status_code=400)
    except ItemDisabled as exc:
        return item_page(request, result={"error": exc.detail, "refused": True}, body=body,
                         status_code=409)
    return item_page(request, result=result, body=body)


class ItemDisabled(HTTPException):
    """A test message refused because its item is disabled (409)."""

    def __init__(self, name: str) -> None:
        super().__init__(409, f"item {name} is disabled: a test message would only wait in its "
                              "queue until the item is enabled; enable it first, then test")


def _refuse_disabled(portal: Portal, name: str) -> None:
    if name in portal.items and not is_enabled(portal.store, portal.production, name):
        raise ItemDisabled(name)


def _confirm_test(request: Request, portal: Portal, user: Principal, name: str,
                  body: str) -> Response:
    return portal.render(request, "confirm_test.html", {
        "question": f"Send this test message to {name}?", "action": request.url.path,
        "body": body}, user=user)


async def test_api(request: Request) -> Response:
    who = await run_in_threadpool(api_user, request, "operator")
    portal = portal_of(request)
    text = (await request.body()).decode("utf-8", "replace")
    return reply(await send_test(portal, who, request.path_params["name"], text))


async def send_test(portal: Portal, who: Principal, name: str, text: str) -> dict[str, Any]:
    """Send ``text`` to item ``name`` as ``who``'s test message and wait up to
    :data:`TEST_WAIT` seconds for its end: ``{"id", "session_id", "status", "response",
    "error"}`` (status ``Queued``/``Delivered`` and error None when it did not end in
    time). MessageError (nothing sent) for a body ``encore send`` would refuse; ItemDisabled
    (409, nothing sent) while the item is disabled."""
    who.require("operator")
    if name not in portal.items:
        raise HTTPException(404, f"no item named {name!r} in the production")
    if len(text) > MAX_TEST_BODY:
        raise HTTPException(413, f"the body is over {MAX_TEST_BODY} characters")
    await run_in_threadpool(_refuse_disabled, portal, name)
    def take_in() -> Accepted:
        accepted = accept_message(portal.store, portal.production, name,
                                  decode_body(text, where="request"), source=f"test:{who.name}",
                                  waited=True)
        actions.audit(portal.store, who, "test", f"test message {accepted.id} sent to item "
                      f"{name}", item=name, message_id=accepted.id,
                      session_id=accepted.session_id)
        return accepted

    accepted, outcome = await accept_and_wait(portal.store, take_in, TEST_WAIT)
    if outcome is None:
        row = await run_in_threadpool(portal.store.get_message, accepted.id)
        outcome = {"id": accepted.id, "session_id": accepted.session_id,
                   "status": row.status if row else Status.QUEUED, "response": None,
                   "error": None, "waited": TEST_WAIT}
    return outcome


# -- reload ------------------------------------------------------------------------------
async def reload_form(request: Request) -> Response:
    user, form = await acting_user(request, "admin")
    portal = portal_of(request)
    if not confirmed(form):
        return confirm(request, portal, user, "Ask every daemon to reload the production "
                        "file?", request.url.path)
    await run_in_threadpool(actions.reload_production, portal.store, user)
    return RedirectResponse("/?reloading=1", status_code=303)


async def reload_api(request: Request) -> Response:
    who = await run_in_threadpool(api_user, request, "admin")
    await run_in_threadpool(actions.reload_production, portal_of(request).store, who)
    return reply({"reload": "asked of every daemon"}, 202)
