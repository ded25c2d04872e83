"""The statuses a message passes through (``message_header.status``), without SQL: what the
command line, the waiters and the tables share."""
from __future__ import annotations

import enum


class Status(str, enum.Enum):
    """A message's status. Each member is the very string stored in ``message_header.status``
    (and shown in JSON), so a member compares equal to the stored text and binds as it."""

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
# the end of a message's delivery, what a waiter waits for and what an operator may resend:
# a final status, or Suspended (an operator must act)
ENDED_STATUSES = (*FINAL_STATUSES, Status.SUSPENDED.value)
