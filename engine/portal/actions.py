"""Operator actions from the portal and the API, each with an ``Info`` event naming who.

The actions themselves are :mod:`engine.store.operator`'s — the same checks and the same
events as ``encore resend|suspend|discard|enable|disable`` — this module only adds the
audit event (DESIGN.md §8: every operator action names the user) and the bulk resend.
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.clock import utcnow
from engine.errors import OperatorError
from engine.portal.auth import Principal
from engine.store import operator, viewer
from engine.store.sql import SqlStore

MESSAGE_ACTIONS = ("resend", "suspend", "discard")
BULK_RESEND_LIMIT = 10_000  # messages one bulk resend may queue


def act_on_message(store: SqlStore, items: Sequence[str], who: Principal, action: str,
                   message_id: int) -> int:
    """Resend, suspend or discard ``message_id`` as ``who`` (an operator); return the id of
    the message to show next: the resent copy, or the message itself. OperatorError (and
    nothing changed) when its status does not allow it."""
    who.require("operator")
    now = utcnow()
    if action == "resend":
        shown = operator.resend(store, message_id, now=now, known_items=items)
        text = f"message {message_id} resent as message {shown}"
    elif action == "suspend":
        operator.suspend(store, message_id, now=now)
        shown, text = message_id, f"message {message_id} suspended"
    elif action == "discard":
        operator.discard(store, message_id, now=now)
        shown, text = message_id, f"message {message_id} discarded"
    else:
        raise OperatorError(f"unknown action {action!r}; expected one of "
                            f"{', '.join(MESSAGE_ACTIONS)}")
    row = store.get_message(message_id)
    _audit(store, who, action, text, item=row.target if row else None, message_id=message_id,
           session_id=row.session_id if row else None)
    return shown


def set_item_enabled(store: SqlStore, items: Sequence[str], who: Principal, name: str,
                     enabled: bool) -> None:
    """Enable or disable item ``name`` as ``who`` (an operator)."""
    who.require("operator")
    verb = "enabled" if enabled else "disabled"
    if enabled:
        operator.enable_item(store, name, known_items=items, now=utcnow())
    else:
        operator.disable_item(store, name, known_items=items, now=utcnow(),
                              reason=f"by {who.name} in the portal")
    _audit(store, who, "enable" if enabled else "disable", f"item {name} {verb}", item=name)


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
    new_ids, skipped = [], []
    for message_id in viewer.resendable_ids(store, flt, limit=BULK_RESEND_LIMIT):
        try:
            new_ids.append(operator.resend(store, message_id, now=utcnow(), known_items=items))
        except OperatorError:
            skipped.append(message_id)
    text = f"{len(new_ids)} message(s) resent by filter"
    if skipped:
        text += f"; {len(skipped)} skipped (status changed): {_ids(skipped)}"
    _audit(store, who, "bulk_resend", text)
    return new_ids


def _audit(store: SqlStore, who: Principal, action: str, text: str, *, item: str | None = None,
           message_id: int | None = None, session_id: int | None = None) -> None:
    via = "the portal" if who.kind == "user" else "the API"
    store.events.write("Info", f"{text} by {who.kind} {who.name!r} ({who.role}) through {via}",
                       config_name=item, message_id=message_id, session_id=session_id,
                       source_class="Portal", source_method=action)


def _ids(ids: list[int], shown: int = 20) -> str:
    text = ", ".join(str(i) for i in ids[:shown])
    return text + (f" and {len(ids) - shown} more" if len(ids) > shown else "")
