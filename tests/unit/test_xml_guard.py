"""check_xml (adapters/xml_guard.py): each limit refuses a document just past it and lets one
at it through, naming the setting; what is not XML, or has a DTD, is left to the parser
that reads it next; the 60,000-attribute element that stalls zeep is refused in one
linear pass."""
from __future__ import annotations

import time

import pytest

from adapters.xml_guard import (
    DEFAULT_MAX_ATTRIBUTES,
    XML_LIMIT_SETTINGS,
    XmlLimitExceeded,
    XmlLimits,
    check_xml,
)
from engine.config.production import parse_production
from engine.errors import ConfigurationError
from engine.settings import validate_settings

SMALL = XmlLimits(xml_max_attributes=3, xml_max_elements=6, xml_max_depth=3,
                  xml_max_children=4, xml_max_text_chars=10)


def _attributes(count: int) -> bytes:
    return ("<r " + " ".join(f'a{i}="v"' for i in range(count)) + "/>").encode()


def _nested(depth: int) -> bytes:
    return ("<e>" * depth + "</e>" * depth).encode()


@pytest.mark.parametrize(("document", "setting"), [
    (_attributes(4), "xml_max_attributes"),  # one attribute too many
    (b'<r xmlns="urn:a" xmlns:b="urn:b" b:c="1" d="2"/>', "xml_max_attributes"),  # 2 + 2
    (b"<r><e><e/><e/></e><e><e/><e/></e></r>", "xml_max_elements"),  # seven elements
    (b"<r>" + b"<e/>" * 5 + b"</r>", "xml_max_children"),  # five children of one
    (_nested(4), "xml_max_depth"),  # four deep
    (b"<r>" + b"x" * 11 + b"</r>", "xml_max_text_chars"),  # a text node of 11
    (b"<r>" + b"x" * 6 + b"&amp;" + b"y" * 4 + b"</r>", "xml_max_text_chars"),  # 11, in pieces
    (b'<r a="' + b"x" * 11 + b'"/>', "xml_max_text_chars"),  # an attribute value of 11
])
def test_a_document_just_past_a_limit_is_refused_naming_it(document: bytes,
                                                           setting: str) -> None:
    with pytest.raises(XmlLimitExceeded, match=setting) as caught:
        check_xml(document, SMALL)
    assert caught.value.setting == setting
    assert caught.value.limit == getattr(SMALL, setting)


@pytest.mark.parametrize("document", [
    _attributes(3),  # at the attribute limit
    b"<r>" + b"<e/>" * 4 + b"</r>",  # four children
    b"<r><e><e/><e/></e><e><e/></e></r>",  # six elements, none with more than two children
    _nested(3),  # three deep
    b"<r>" + b"x" * 10 + b"</r><!-- " + b"c" * 50 + b" -->",  # ten characters; comments free
    b"<r>" + b"<e>xxxxxxxxxx</e>" * 2 + b"</r>",  # two text nodes of ten, each counted alone
])
def test_a_document_at_every_limit_passes(document: bytes) -> None:
    check_xml(document, SMALL)


@pytest.mark.parametrize("document", [
    b"<r><unclosed></r>",  # not well-formed: the caller's parser says why
    b"not xml at all",  # the same
    b'<!DOCTYPE r [<!ENTITY a "aaaaaaaaaaaaaaaaaaaa">]><r>&a;&a;</r>',  # a DTD: refused next
])
def test_what_is_not_plain_xml_is_left_to_the_parser_that_reads_it_next(document: bytes) -> None:
    check_xml(document, SMALL)


def test_the_element_that_stalls_zeep_is_refused_in_one_linear_pass() -> None:
    document = _attributes(60_000)  # zeep: 15 s in one call holding the interpreter
    began = time.monotonic()
    with pytest.raises(XmlLimitExceeded, match="60000 attributes.*xml_max_attributes 256"):
        check_xml(document, XmlLimits.defaults())
    assert time.monotonic() - began < 5  # lxml alone: about 0.05 s


def test_the_limits_are_settings_with_their_defaults_and_bounds() -> None:
    assert XmlLimits.defaults().xml_max_attributes == DEFAULT_MAX_ATTRIBUTES
    raised = XmlLimits.of(validate_settings("Item", {"xml_max_attributes": 70_000},
                                            XML_LIMIT_SETTINGS))
    assert raised.xml_max_attributes == 70_000
    check_xml(_attributes(300), raised)
    with pytest.raises(ConfigurationError, match="xml_max_depth"):
        validate_settings("Item", {"xml_max_depth": 0}, XML_LIMIT_SETTINGS)


INBOUND = ('[inbound]\nport = 8099\n[[items]]\nname = "In"\nclass = "engine.inbound:SoapService"\n'
           '[items.settings]\nwsdl = "x.wsdl"\npath = "/soap/x"\ntarget = "Noop"\n{extra}\n'
           '[[items]]\nname = "Noop"\nclass = "operations.http:HttpOperation"\n'
           '[items.settings]\nurl = "http://127.0.0.1:9"\n')


@pytest.mark.parametrize(("extra", "key"), [
    ('public_url = "ftp://soap.example.com/x"', "public_url"),  # not http(s)
    ('public_url = "https://soap.example.com/x?wsdl"', "public_url"),  # a query
    ("xml_max_children = 0", "xml_max_children"),  # below 1
])
def test_a_soap_service_s_bad_public_url_or_limit_is_refused_naming_the_key(
        extra: str, key: str) -> None:
    with pytest.raises(ConfigurationError, match=key):
        parse_production(INBOUND.format(extra=extra), env={})


def test_a_soap_service_takes_its_public_url_and_limits() -> None:
    production = parse_production(INBOUND.format(
        extra='public_url = "https://soap.example.com/x"\nxml_max_depth = 7'), env={})
    settings = production.item("In").settings
    assert settings["public_url"] == "https://soap.example.com/x"
    assert XmlLimits.of(settings).xml_max_depth == 7
    assert XmlLimits.of(settings).xml_max_attributes == DEFAULT_MAX_ATTRIBUTES
