"""XML limits: one linear pass over a document before zeep (or anything else) reads it
(docs/security.md, "XML limits").

zeep's work on an element is not always linear in its size: ``ComplexType.parse_xmlelement``
copies an element's attribute map, and lxml finds each attribute's value by name, one walk
of the attribute list per attribute — 60,000 attributes on one element (650 KB) cost 15 s in
a single C call that holds the interpreter, stalling every thread of the daemon. lxml itself
parses that document in 0.02 s. A repeated ``xsd:choice`` copies an element's remaining
children once per child it reads (40,000 children: 10 s). :func:`check_xml` runs lxml's
parser with a target that sees each element's attributes once, as its parser reports them,
and refuses a document past any of :class:`XmlLimits` before zeep sees it; nothing here
looks an attribute up by name.

Both edges use it: an inbound SOAP request (:mod:`engine.inbound.wsdl`) and an outbound SOAP
response or WSDL document (:mod:`adapters.soap_transport`). What is not well-formed XML, or
has a DTD, passes: the parser that reads the document next refuses it, with its own words.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import lxml.etree

from engine.settings import Setting, TypedSettings

__all__ = ["XML_LIMIT_SETTINGS", "XmlLimitExceeded", "XmlLimits", "check_xml"]

DEFAULT_MAX_ATTRIBUTES = 256  # attributes and namespace declarations on one element
DEFAULT_MAX_ELEMENTS = 100_000  # elements in one document
DEFAULT_MAX_DEPTH = 100  # elements nested in one another, the root counting 1
DEFAULT_MAX_CHILDREN = 10_000  # child elements of one element (zeep's choice: quadratic)
DEFAULT_MAX_TEXT_CHARS = 8 * 1024 * 1024  # characters of one text node or attribute value

XML_LIMIT_SETTINGS: tuple[Setting, ...] = (
    Setting(name="xml_max_attributes", kind=int, default=DEFAULT_MAX_ATTRIBUTES, minimum=1,
            help="attributes and namespace declarations one XML element may carry"),
    Setting(name="xml_max_elements", kind=int, default=DEFAULT_MAX_ELEMENTS, minimum=1,
            help="elements one XML document may hold"),
    Setting(name="xml_max_depth", kind=int, default=DEFAULT_MAX_DEPTH, minimum=1,
            help="how deep XML elements may nest (the root element is depth 1)"),
    Setting(name="xml_max_children", kind=int, default=DEFAULT_MAX_CHILDREN, minimum=1,
            help="child elements one XML element may hold (a list of more items needs more)"),
    Setting(name="xml_max_text_chars", kind=int, default=DEFAULT_MAX_TEXT_CHARS, minimum=1,
            help="characters of one XML text node or attribute value"),
)


class XmlLimitExceeded(ValueError):
    """A document past one of its :class:`XmlLimits`: ``setting`` names the limit (the
    setting that raises it), ``limit`` its value; the text says where it was passed."""

    def __init__(self, text: str, *, setting: str, limit: int) -> None:
        super().__init__(text)
        self.setting = setting
        self.limit = limit


@dataclass(frozen=True, slots=True, kw_only=True)
class XmlLimits(TypedSettings):
    """The limits of :data:`XML_LIMIT_SETTINGS`, typed. Every one is at least 1."""

    DECLARED: ClassVar[tuple[Setting, ...]] = XML_LIMIT_SETTINGS

    xml_max_attributes: int
    xml_max_elements: int
    xml_max_depth: int
    xml_max_children: int
    xml_max_text_chars: int

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> XmlLimits:
        """The limits in validated ``settings`` (snake_case keys), defaults for those absent."""
        return cls.from_validated(settings)


class _Doctype(Exception):  # control flow: the caller's parser refuses DTDs
    """The document has a DTD: left to the parser that refuses it."""


class _Counter:
    """An lxml parser target that raises :class:`XmlLimitExceeded` at the first limit passed."""

    def __init__(self, limits: XmlLimits) -> None:
        self.limits = limits
        self.elements = 0
        self.depth = 0
        self.children = [0]  # child elements so far of each open element (and the document)
        self.declared = 0  # namespace declarations seen since the last start tag
        self.text = 0  # characters of the text node being read

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
    """Raise :class:`XmlLimitExceeded` if ``content`` passes one of ``limits``; return for
    any other document — within them, not XML, or with a DTD (the caller's own parser
    refuses those). Time and memory linear in ``len(content)``; no tree is built."""
    parser = lxml.etree.XMLParser(target=_Counter(limits), resolve_entities=False,
                                  no_network=True, load_dtd=False, huge_tree=False)
    try:
        lxml.etree.fromstring(content, parser)
    except (_Doctype, lxml.etree.XMLSyntaxError):
        return
