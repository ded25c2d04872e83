"""Ensemble's ReplyCodeActions: map an error to actions (docs/retries.md rule 3).

Comma-separated rules ``<codes>=<actions>``, e.g. ``E=R,E#503=W,(E#404,E#410)=F,X=R``; codes and
actions are listed in docs/retries.md. All W-only rules that match add warnings, then the first
other match supplies the actions; none: ``E=F``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NoReturn

from engine.errors import Delivery

DEFAULT_REPLY_CODE_ACTIONS = "E=F"

_LETTERS = {"C": "complete", "W": "warn", "R": "retry", "S": "suspend", "D": "disable", "F": "fail"}
_DELIMITERS = "=,()"
_CODE_HINT = "a reply code (E, E#code, E*text, X or a list in parentheses)"


@dataclass(frozen=True)
class Actions:
    """What to do with an error; several may be set (e.g. retry and warn)."""

    complete: bool = False
    warn: bool = False
    retry: bool = False
    suspend: bool = False
    disable: bool = False
    fail: bool = False

    @property
    def letters(self) -> str:
        """The actions in Ensemble's letters, e.g. ``"WR"``; empty when none is set."""
        return "".join(letter for letter, name in _LETTERS.items() if getattr(self, name))


_WARN_ONLY = Actions(warn=True)


@dataclass(frozen=True)
class ReplyCode:
    """One code: ``kind`` ``E``, ``E#``, ``E*`` or ``X``; ``value`` the code or text."""

    kind: str
    value: str = ""

    def matches(self, error: BaseException) -> bool:
        """True when ``error`` is covered by this code."""
        if self.kind == "E":
            return True
        if self.kind == "X":
            return getattr(error, "delivery", None) in (Delivery.NOT_SENT, Delivery.UNKNOWN)
        if self.kind == "E*":
            return self.value.lower() in str(error).lower()
        return _covers(local_name(self.value).lower(), _codes_of(error))


def local_name(code: str) -> str:
    """The local part of a qualified code (``soap11env:Server`` → ``Server``)."""
    return code.rsplit("}", 1)[-1].rsplit(":", 1)[-1]


def _covers(wanted: str, codes: set[str]) -> bool:
    """True when ``wanted`` is one of ``codes`` or the generic part of a dotted one."""
    return any(code == wanted or code.startswith(wanted + ".") for code in codes)


def _codes_of(error: BaseException) -> set[str]:
    """Lower-case local names of ``error``'s classes and codes."""
    codes = {cls.__name__.lower() for cls in type(error).__mro__}
    for attr in ("code", "status_code", "fault_code"):
        value = getattr(error, attr, None)
        if value is not None:
            codes.add(local_name(str(value)).lower())
    return codes


@dataclass(frozen=True)
class ReplyCodeRule:
    """``codes=actions``: the rule applies when any of ``codes`` matches."""

    codes: tuple[ReplyCode, ...]
    actions: Actions

    def matches(self, error: BaseException) -> bool:
        return any(code.matches(error) for code in self.codes)


@dataclass(frozen=True)
class ReplyCodeActions:
    """A parsed ``reply_code_actions`` setting. Build it with :meth:`parse`."""

    rules: tuple[ReplyCodeRule, ...]

    @classmethod
    def parse(cls, text: str) -> ReplyCodeActions:
        """Parse Ensemble syntax; ``ValueError`` gives the 1-based position of the first error."""
        return cls(_Parser(text).rules())

    def evaluate(self, error: BaseException) -> Actions:
        """The actions for ``error`` (fail when no rule matches)."""
        warned = any(r.actions == _WARN_ONLY and r.matches(error) for r in self.rules)
        chosen = next((r.actions for r in self.rules
                       if r.actions != _WARN_ONLY and r.matches(error)), Actions(fail=True))
        return dataclasses.replace(chosen, warn=chosen.warn or warned)


def check_reply_code_actions(value: str) -> str:
    """``Setting.check`` for ``reply_code_actions``: ``value`` if it parses, else ``ValueError``."""
    ReplyCodeActions.parse(value)
    return value


class _Parser:
    """A recursive-descent parser over ``text``; ``pos`` is a 0-based index."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def rules(self) -> tuple[ReplyCodeRule, ...]:
        rules = [self.rule()]
        while self.accept(","):
            rules.append(self.rule())
        self.skip_space()
        if self.pos < len(self.text):
            self.fail("',' or the end of the text")
        return tuple(rules)

    def rule(self) -> ReplyCodeRule:
        if self.accept("("):
            codes = [self.code()]
            while self.accept(","):
                codes.append(self.code())
            self.expect(")", "',' or ')'")
        else:
            codes = [self.code()]
        self.expect("=", "'='")
        return ReplyCodeRule(tuple(codes), self.actions())

    def code(self) -> ReplyCode:
        self.skip_space()
        letter = self.peek().upper()
        if letter == "X":
            self.pos += 1
            return ReplyCode("X")
        if letter != "E":
            self.fail(_CODE_HINT)
        self.pos += 1
        for marker, what in (("#", "an error code"), ("*", "a text")):
            if self.peek() == marker:
                self.pos += 1
                return ReplyCode("E" + marker, self.word(f"{what} after 'E{marker}'"))
        return ReplyCode("E")

    def word(self, what: str) -> str:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in _DELIMITERS:
            self.pos += 1
        value = self.text[start:self.pos].strip()
        if not value:
            self.pos = start
            self.fail(what)
        return value

    def actions(self) -> Actions:
        self.skip_space()
        names = []
        while self.peek().upper() in _LETTERS:
            names.append(_LETTERS[self.peek().upper()])
            self.pos += 1
        if not names:
            self.fail("actions (letters C, W, R, S, D, F)")
        return Actions(**{name: True for name in names})

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_space(self) -> None:
        while self.peek().isspace():
            self.pos += 1

    def accept(self, char: str) -> bool:
        self.skip_space()
        if self.peek() == char:
            self.pos += 1
            return True
        return False

    def expect(self, char: str, what: str) -> None:
        if not self.accept(char):
            self.fail(what)

    def fail(self, expected: str) -> NoReturn:
        found = repr(self.text[self.pos]) if self.pos < len(self.text) else "the end of the text"
        raise ValueError(f"at character {self.pos + 1} of {self.text!r}: "
                         f"expected {expected}, found {found}")
