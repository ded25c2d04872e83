"""The statuses a message passes through (``message_header.status``), without SQL: what the
command line, the waiters and the tables share."""
from __future__ import annotations

MESSAGE_STATUSES = ("Created", "Queued", "Delivered", "Completed", "Error", "Suspended",
                    "Discarded", "Aborted", "Deferred")
FINAL_STATUSES = ("Completed", "Error", "Discarded", "Aborted")
# what a waiter waits for: a final status, or Suspended (an operator must act)
ENDED_STATUSES = (*FINAL_STATUSES, "Suspended")
