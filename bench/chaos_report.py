"""The fault campaign's table (bench/chaos.py): rounds, faults by kind, messages by
status and violations by invariant, per database, from the report's JSON object.
``processed_again``: messages of the idempotent items the server processed more than once
(re-sent after an outcome-unknown attempt, as they allow)."""
from __future__ import annotations

from typing import Any

__all__ = ["table"]


def table(report: dict[str, Any]) -> str:
    names = list(report["databases"])
    lines = [f"Encore fault campaign: seed {report['seed']}, {report['rounds']} rounds, "
             f"{report['seconds']:.0f} s (drain {report['drain_seconds']:.1f} s), "
             f"PostgreSQL {report['postgresql']}, disk full by {report['disk_full']}",
             f"load average at start {report['load_start']}, at end {report['load_end']}",
             "", "faults: " + ", ".join(f"{k} {v}" for k, v in report["faults"].items()), ""]
    rows = [("", *names)]
    for key in ("messages", "accepted", "refused", "requests", "processed_again"):
        rows.append((key, *(str(report["databases"][n][key]) for n in names)))
    for status in sorted({s for n in names for s in report["databases"][n]["statuses"]}):
        rows.append((f"  {status}", *(str(report["databases"][n]["statuses"].get(status, 0))
                                       for n in names)))
    rows.append(("violations", *("" for _ in names)))
    for invariant in report["databases"][names[0]]["violations"] if names else ():
        rows.append((f"  {invariant}", *(str(report["databases"][n]["violations"][invariant])
                                          for n in names)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))) for row in rows]
    after = [f"{d} {n}" for name in names
             for d, n in report["databases"][name]["requests_after_faults"].items()]
    lines += ["", "requests after the last fault, by daemon: " + ", ".join(after)]
    lost = [f"{d} {n}" for name in names
            for d, n in report["databases"][name].get("claims_lost", {}).items()]
    lines += ["claims or leases lost (by their daemons' logs): " + (", ".join(lost) or "none")]
    late = [f"{d} {v['spells']} (longest {v['longest_s']:.1f} s)" for name in names
            for d, v in report["databases"][name].get("late_heartbeats", {}).items()]
    lines += ["heartbeats older than the lease (each a window in which that daemon may lose "
              "claims): " + (", ".join(late) or "none")]
    total = report["violations"]
    lines += ["", f"{total} violation(s)" + (":" if total else "")]
    lines += [f"  {v}" for v in report["examples"]]
    if report.get("work"):
        lines.append(f"kept: {report['work']}")
    return "\n".join(lines)
