"""Operator actions from the portal and the API: :mod:`engine.store.operator`'s, called with
``by=`` naming the user, so the one ``Info`` event they write is the audit record."""
from __future__ import annotations

from collections.abc import Sequence

from engine.clock import utcnow
from engine.config.production import ProductionConfig
from engine.errors import OperatorError
from engine.portal.status import production_view_of_item
from engine.serving.auth import Principal
from engine.store import operator, running, viewer
from engine.store.notify import Announcement, Kind
from engine.store.sql import SqlStore

MESSAGE_ACTIONS = ("resend", "suspend", "discard")
BULK_RESEND_LIMIT = 10_000  # messages one bulk resend may queue


def actor(who: Principal) -> str:
    """``who`` as event texts name them: ``user 'olga' (operator) through the portal``."""
    via = "the portal" if who.kind == "user" else "the API"
    return f"{who.kind} {who.name!r} ({who.role}) through {via}"


def act_on_message(store: SqlStore, items: Sequence[str], who: Principal, action: str,
                   message_id: int) -> int:
    """Resend, suspend or discard ``message_id`` as ``who`` (an operator); return the id of
    the message to show next: the resent copy, or the message itself. OperatorError (and
    nothing changed) when its status does not allow it."""
    who.require("operator")
    now, by = utcnow(), actor(who)
    if action == "resend":
        return operator.resend(store, message_id, now=now, known_items=items, by=by)
    if action == "suspend":
        operator.suspend(store, message_id, now=now, by=by)
    elif action == "discard":
        operator.discard(store, message_id, now=now, by=by)
    else:
        raise OperatorError(f"unknown action {action!r}; expected one of "
                            f"{', '.join(MESSAGE_ACTIONS)}")
    return message_id


def set_item_enabled(store: SqlStore, items: Sequence[str], who: Principal, name: str,
                     enabled: bool) -> None:
    """Enable or disable item ``name`` as ``who`` (an operator)."""
    who.require("operator")
    if enabled:
        operator.enable_item(store, name, known_items=items, now=utcnow(), by=actor(who))
    else:
        operator.disable_item(store, name, known_items=items, now=utcnow(), reason=None,
                              by=actor(who))


def bulk_resend(store: SqlStore, items: Sequence[str], who: Principal,
                flt: viewer.MessageFilter, confirmed_count: int) -> list[int]:
    """Resend every resendable request ``flt`` selects, if there are exactly
    ``confirmed_count`` of them (what the operator typed); return the new ids. A message
    whose status changed in between is skipped."""
    who.require("operator")
    count = viewer.count_messages(store, flt, resendable=True)
    if count != confirmed_count:
        raise OperatorError(f"the filter now selects {count} message(s) that can be resent, "
                            f"not {confirmed_count}; nothing was resent")
    if count > BULK_RESEND_LIMIT:
        raise OperatorError(f"the filter selects {count} messages; at most "
                            f"{BULK_RESEND_LIMIT} can be resent at once: narrow it")
    new_ids, skipped, by = [], [], actor(who)
    for message_id in viewer.resendable_ids(store, flt, limit=BULK_RESEND_LIMIT):
        try:
            new_ids.append(operator.resend(store, message_id, now=utcnow(), known_items=items,
                                           by=by))
        except OperatorError:
            skipped.append(message_id)
    text = f"{len(new_ids)} message(s) resent by filter"
    if skipped:
        text += f"; {len(skipped)} skipped (status changed): {_ids(skipped)}"
    audit(store, who, "bulk_resend", text)
    return new_ids


def audit(store: SqlStore, who: Principal, action: str, text: str, *, item: str | None = None,
          message_id: int | None = None, session_id: int | None = None) -> None:
    """The one ``Info`` event of an action that writes none itself (a bulk resend's whole,
    the administration's actions): ``text`` by ``who``."""
    store.events.write("Info", f"{text} by {actor(who)}",
                       config_name=item, message_id=message_id, session_id=session_id,
                       source_class="Portal", source_method=action)


def _ids(ids: list[int], shown: int = 20) -> str:
    text = ", ".join(str(i) for i in ids[:shown])
    return text + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


# -- the console (docs/portal.md) ---------------------------------------------------------
def restart_item(store: SqlStore, production: ProductionConfig, who: Principal,
                 name: str) -> list[str]:
    """Ask every daemon running item ``name`` to restart it (``on_tear_down``, a new
    adapter, ``on_init``); return those daemons. OperatorError when no daemon runs it."""
    who.require("operator")
    view = production_view_of_item(store, production, name)
    daemons = [d["daemon"] for d in view["running"]["daemons"]]
    if view["kind"] == "service":
        raise OperatorError(f"item {name!r} is a business service: it runs on the leader's "
                            "schedule, there is nothing to restart")
    if not daemons:
        raise OperatorError(f"item {name!r} runs on no daemon: there is nothing to restart")
    running.announce(store, [Announcement.control(Kind.RESTART, name)])
    audit(store, who, "restart", f"item {name} restart asked of "
          f"{len(daemons)} daemon(s): {', '.join(daemons)}", item=name)
    return daemons


def reload_production(store: SqlStore, who: Principal) -> None:
    """Ask every daemon to reload the production file, as SIGHUP does (each reload all or
    nothing; a refused one says why in an Error event and on the production page)."""
    who.require("admin")
    running.announce(store, [Announcement.control(Kind.RELOAD)])
    audit(store, who, "reload", "reload of the production file asked of every daemon")
