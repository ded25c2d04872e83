"""The statuses a message passes through (``message_header.status``), without SQL: what the
command line, the waiters and the tables share."""
from __future__ import annotations

import enum


class Status(str, enum.Enum):
    """A message's status; each member is the very string stored and shown."""

    CREATED = "Created"
    QUEUED = "Queued"  # waiting in its queue (also parked until its next attempt)
    DELIVERED = "Delivered"  # claimed by a daemon, which holds its lease
    COMPLETED = "Completed"
    ERROR = "Error"
    SUSPENDED = "Suspended"  # set aside until an operator resends or discards it
    DISCARDED = "Discarded"
    ABORTED = "Aborted"
    DEFERRED = "Deferred"

    def __str__(self) -> str:
        return self.value


MESSAGE_STATUSES = tuple(s.value for s in Status)
# the statuses a message never leaves (what a purge may delete)
FINAL_STATUSES = tuple(s.value for s in (Status.COMPLETED, Status.ERROR, Status.DISCARDED,
                                         Status.ABORTED))
# what a waiter waits for and an operator may resend: final, or Suspended
ENDED_STATUSES = (*FINAL_STATUSES, Status.SUSPENDED.value)
