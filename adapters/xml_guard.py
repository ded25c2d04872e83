"""XML limits: one linear pass over a document before zeep reads it (docs/security.md, "XML
limits", says why zeep needs it). Used for inbound SOAP requests and outbound responses and
WSDL documents; what is not well-formed or has a DTD passes, for the next parser to refuse.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import lxml.etree

from engine.settings import Setting, TypedSettings, setting

__all__ = ["XML_LIMIT_SETTINGS", "XmlLimitExceeded", "XmlLimits", "check_xml"]

DEFAULT_MAX_ATTRIBUTES = 256
DEFAULT_MAX_ELEMENTS = 100_000
DEFAULT_MAX_DEPTH = 100
DEFAULT_MAX_CHILDREN = 10_000
DEFAULT_MAX_TEXT_CHARS = 8 * 1024 * 1024

class XmlLimitExceeded(ValueError):
    """A document past the limit ``setting`` (of value ``limit``)."""

    def __init__(self, text: str, *, setting: str, limit: int) -> None:
        super().__init__(text)
        self.setting = setting
        self.limit = limit


@dataclass(frozen=True, kw_only=True)
class XmlLimits(TypedSettings):
    """The XML limits of an inbound SOAP service or a SOAP adapter: :data:`XML_LIMIT_SETTINGS`."""

    xml_max_attributes: int = setting(
        kind=int, default=DEFAULT_MAX_ATTRIBUTES, minimum=1,
        help="attributes and namespace declarations one XML element may carry")
    xml_max_elements: int = setting(kind=int, default=DEFAULT_MAX_ELEMENTS, minimum=1,
                                    help="elements one XML document may hold")
    xml_max_depth: int = setting(
        kind=int, default=DEFAULT_MAX_DEPTH, minimum=1,
        help="how deep XML elements may nest (the root element is depth 1)")
    xml_max_children: int = setting(
        kind=int, default=DEFAULT_MAX_CHILDREN, minimum=1,
        help="child elements one XML element may hold (a list of more items needs more)")
    xml_max_text_chars: int = setting(
        kind=int, default=DEFAULT_MAX_TEXT_CHARS, minimum=1,
        help="characters of one XML text node or attribute value")

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> XmlLimits:
        """The limits in validated ``settings``, defaults for those absent."""
        return cls.from_validated(settings)


XML_LIMIT_SETTINGS: tuple[Setting, ...] = XmlLimits.DECLARED


class _Doctype(Exception):
    """The document has a DTD: left to the parser that refuses it."""


class _Counter:
    """An lxml parser target that raises :class:`XmlLimitExceeded` at the first limit passed."""

    def __init__(self, limits: XmlLimits) -> None:
        self.limits = limits
        self.elements = 0
        self.depth = 0
        self.children = [0]
        self.declared = 0
        self.text = 0

    def _exceeded(self, setting: str, what: str) -> XmlLimitExceeded:
        limit = getattr(self.limits, setting)
        return XmlLimitExceeded(f"the XML document has {what}, over {setting} {limit}",
                                setting=setting, limit=limit)

    def start_ns(self, prefix: str | None, uri: str) -> None:
        self.declared += 1

    def start(self, tag: str, attrib: Mapping[str, str]) -> None:
        limits = self.limits
        self.elements += 1
        self.depth += 1
        self.text = 0
        count, self.declared = len(attrib) + self.declared, 0
        if count > limits.xml_max_attributes:
            raise self._exceeded("xml_max_attributes",
                                 f"an element <{tag}> with {count} attributes and namespace "
                                 "declarations")
        if self.elements > limits.xml_max_elements:
            raise self._exceeded("xml_max_elements", f"more than {limits.xml_max_elements} "
                                                     "elements")
        if self.depth > limits.xml_max_depth:
            raise self._exceeded("xml_max_depth", f"elements nested more than "
                                                  f"{limits.xml_max_depth} deep (at <{tag}>)")
        self.children[-1] += 1
        if self.children[-1] > limits.xml_max_children:
            raise self._exceeded("xml_max_children", f"an element with more than "
                                                     f"{limits.xml_max_children} child elements "
                                                     f"(the last <{tag}>)")
        self.children.append(0)
        longest = max(map(len, attrib.values()), default=0)
        if longest > limits.xml_max_text_chars:
            raise self._exceeded("xml_max_text_chars", f"an attribute value of {longest} "
                                                       f"characters (on <{tag}>)")

    def end(self, tag: str) -> None:
        self.depth -= 1
        self.text = 0
        self.children.pop()

    def data(self, text: str) -> None:
        self.text += len(text)  # lxml hands one text node over in pieces
        if self.text > self.limits.xml_max_text_chars:
            raise self._exceeded("xml_max_text_chars", f"a text node of more than "
                                                       f"{self.limits.xml_max_text_chars} "
                                                       "characters")

    def doctype(self, *_: Any) -> None:
        raise _Doctype

    def close(self) -> None:
        return None


def check_xml(content: bytes, limits: XmlLimits) -> None:
    """Raise :class:`XmlLimitExceeded` if ``content`` passes one of ``limits``, in linear
    time and without building a tree."""
    parser = lxml.etree.XMLParser(target=_Counter(limits), resolve_entities=False,
                                  no_network=True, load_dtd=False, huge_tree=False)
    try:
        lxml.etree.fromstring(content, parser)
    except (_Doctype, lxml.etree.XMLSyntaxError):
        return
