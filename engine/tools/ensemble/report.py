"""The import report: per item, what was mapped, what took Encore's default, what was not
needed, what has no equivalent (and why) and what is left to do. Printed, and written
beside the production file."""
from __future__ import annotations

from dataclasses import dataclass, field

MAPPED = "mapped"  # an Encore setting, class or key holds it
DEFAULT = "default"  # not given: Encore's default applies (said with Ensemble's)
NOT_NEEDED = "not needed"  # Encore does without it (said why)
NONE = "none"  # no equivalent: dropped (said why)
TODO = "todo"  # a skeleton or value a person must finish

GAPS = (NONE, TODO)  # what makes the import incomplete (exit status 1)
_WIDTH = max(len(s) for s in (MAPPED, DEFAULT, NOT_NEEDED, NONE, TODO))


@dataclass(frozen=True)
class Line:
    """One fact: ``status``, the Ensemble side (``what``) and what became of it (``text``)."""

    status: str
    what: str
    text: str

    def render(self) -> str:
        return f"  {self.status:<{_WIDTH}}  {self.what}: {self.text}"


@dataclass
class Section:
    """The lines of one item (or of the production's own settings)."""

    title: str
    name: str = ""  # what the summary calls it (the title when empty)
    lines: list[Line] = field(default_factory=list)

    def add(self, status: str, what: str, text: str) -> None:
        self.lines.append(Line(status, what, text))

    @property
    def gaps(self) -> list[Line]:
        return [line for line in self.lines if line.status in GAPS]


@dataclass
class Report:
    """Every section, in the source's order."""

    header: list[str]
    sections: list[Section] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when nothing was dropped and nothing is left to do."""
        return not any(s.gaps for s in self.sections)

    def text(self) -> str:
        out = list(self.header)
        for section in self.sections:
            out += ["", section.title, *(line.render() for line in section.lines)]
        out += ["", self.summary()]
        return "\n".join(out) + "\n"

    def summary(self) -> str:
        incomplete = [s.name or s.title for s in self.sections if s.gaps]
        if not incomplete:
            return "everything mapped"
        gaps = sum(len(s.gaps) for s in self.sections)
        return (f"{gaps} thing{'s' if gaps != 1 else ''} with no equivalent or left to do "
                f"(lines marked {NONE!r} or {TODO!r}) in: {', '.join(incomplete)}")
