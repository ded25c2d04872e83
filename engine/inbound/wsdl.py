"""A SOAP service's contract: its WSDL, loaded with zeep, that parses requests and writes
responses (docs/inbound.md: why zeep, the SOAP rules, the served schema documents).

The WSDL and its documents are local files only, read under the local-WSDL rules of
docs/security.md. Requests pass one linear XML-limits pass before zeep's parser, which is
not linear in an element's attributes.
"""
from __future__ import annotations

import copy
import os
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import lxml.etree
import zeep
import zeep.exceptions
import zeep.loader
from lxml.builder import ElementMaker
from zeep.wsdl.bindings.soap import Soap11Binding, Soap12Binding, SoapOperation
from zeep.xsd.context import XmlParserContext

from adapters.soap_transport import DocumentPolicy, local_path, origin_of, read_local
from adapters.xml_guard import XmlLimitExceeded, XmlLimits, check_xml
from engine.errors import DocumentRefused
from operations.soap import to_json_value

__all__ = ["ClientFault", "SoapContract", "SoapCall", "fault_envelope", "SOAP11", "SOAP12"]

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"
WSDL_SOAP11 = "http://schemas.xmlsoap.org/wsdl/soap/"
WSDL_SOAP12 = "http://schemas.xmlsoap.org/wsdl/soap12/"
XSD = "http://www.w3.org/2001/XMLSchema"
WSDL = "http://schemas.xmlsoap.org/wsdl/"
REFERENCES = ((XSD, "import", "schemaLocation"), (XSD, "include", "schemaLocation"),
              (XSD, "redefine", "schemaLocation"), (WSDL, "import", "location"))
MAX_DOCUMENTS = 200
MAX_WSDL_BYTES = 16 * 1024 * 1024
CONTENT_TYPES = {SOAP11: "text/xml; charset=utf-8", SOAP12: "application/soap+xml; charset=utf-8"}
_VERSIONS = {SOAP11: "1.1", SOAP12: "1.2"}
# the actor/role attribute and the values that address this node (absent does too)
_ROLES = {SOAP11: ("actor", {"http://schemas.xmlsoap.org/soap/actor/next"}),
          SOAP12: ("role", {"http://www.w3.org/2003/05/soap-envelope/role/next",
                            "http://www.w3.org/2003/05/soap-envelope/role/ultimateReceiver"})}


class ClientFault(Exception):
    """A request the WSDL does not allow, answered in ``envelope`` with fault ``code``."""

    def __init__(self, text: str, envelope: str = SOAP11, code: str = "Client") -> None:
        super().__init__(text)
        self.envelope = envelope
        self.code = code


@dataclass(frozen=True)
class SoapCall:
    """A parsed request: the operation, its arguments as JSON values, the envelope."""

    operation: SoapOperation
    args: dict[str, Any]
    envelope: str

    @property
    def name(self) -> str:
        return str(self.operation.name)


class _LocalTransport(zeep.Transport):
    """Reads the WSDL's documents as the policy allows local ones; no URL at all."""

    def __init__(self, policy: DocumentPolicy) -> None:
        super().__init__()
        self._policy = policy

    def load(self, url: str) -> bytes:
        if origin_of(url) is not None:
            raise DocumentRefused(url, "a local WSDL may import only files under its "
                                       f"directory {self._policy.directory}, no URL")
        return read_local(url, self._policy.check_local(url), self._policy.limit)


class SoapContract:
    """The WSDL file at ``path``, loaded once; requests are held to ``limits``."""

    def __init__(self, path: str, limits: XmlLimits | None = None) -> None:
        self.path = path
        self.limits = limits or XmlLimits.defaults()
        policy = DocumentPolicy.for_wsdl(path, MAX_WSDL_BYTES)
        self.settings = zeep.Settings(strict=True, xml_huge_tree=False, forbid_dtd=True,
                                      forbid_entities=True, forbid_external=False)
        self._policy = policy
        self._transport = _LocalTransport(policy)
        self._document: lxml.etree._Element | None = None
        # name (posix path from the WSDL's directory) → (real path, document)
        self._imports: dict[str, tuple[str, lxml.etree._Element]] = {}
        self._operations: dict[tuple[str, str], SoapOperation] = {}
        self._types: Any = None

    def load(self) -> None:
        client = zeep.Client(self.path, transport=self._transport, settings=self.settings)
        self._types = client.wsdl.types
        operations: dict[tuple[str, str], SoapOperation] = {}
        for binding in client.wsdl.bindings.values():
            envelope = (SOAP12 if isinstance(binding, Soap12Binding)
                        else SOAP11 if isinstance(binding, Soap11Binding) else None)
            if envelope is None:
                continue
            for operation in binding.all().values():
                body = operation.input.body if operation.input is not None else None
                if body is not None:
                    operations.setdefault((envelope, body.qname.text), operation)
        if not operations:
            raise ValueError("the WSDL binds no SOAP 1.1 or 1.2 operation")
        self._operations = operations
        document = self._parse(self.path)
        self._imports = self._referenced(document)
        self._document = document

    def _parse(self, path: str) -> lxml.etree._Element:
        # zeep annotates the content str; lxml parses the bytes the transport reads
        return zeep.loader.parse_xml(self._transport.load(path),  # type: ignore[arg-type]
                                     self._transport, settings=self.settings)

    def _referenced(self, document: lxml.etree._Element) -> dict[str, tuple[str, Any]]:
        """Every local document ``document`` references, directly or not, by name."""
        root = os.path.dirname(os.path.realpath(self.path))
        found: dict[str, tuple[str, Any]] = {}
        pending = [(os.path.realpath(self.path), document)]
        while pending:
            path, doc = pending.pop()
            for _node, _attribute, location in _references(doc):
                name = _name_of(root, path, location)
                if name is None or name in found:
                    continue
                if len(found) >= MAX_DOCUMENTS:
                    raise ValueError(f"the WSDL references more than {MAX_DOCUMENTS} "
                                     "documents")
                real = self._policy.check_local(os.path.join(root, name))
                found[name] = (real, self._parse(real))
                pending.append(found[name])
        return found

    @property
    def loaded(self) -> bool:
        return self._document is not None

    @property
    def operation_names(self) -> list[str]:
        return sorted({str(op.name) for op in self._operations.values()})

    def versions(self) -> list[str]:
        return sorted({_VERSIONS[envelope] for envelope, _ in self._operations})

    @property
    def imported(self) -> list[str]:
        """The names of the documents served beside the WSDL (``?xsd=NAME``)."""
        return sorted(self._imports)

    # -- the WSDL as served ------------------------------------------------------------
    def served(self, address: str, name: str | None = None) -> bytes | None:
        """The WSDL (``name`` None) or document ``name`` as served at ``address``, its
        references pointing at ``address?xsd=NAME``; None for an unknown ``name``."""
        assert self._document is not None
        root = os.path.dirname(os.path.realpath(self.path))
        if name is None:
            path, original = os.path.realpath(self.path), self._document
        elif name in self._imports:
            path, original = self._imports[name]
        else:
            return None
        document = copy.deepcopy(original)
        for namespace in (WSDL_SOAP11, WSDL_SOAP12):
            for node in document.iter(f"{{{namespace}}}address"):
                node.set("location", address)
        for node, attribute, location in _references(document):
            referenced = _name_of(root, path, location)
            if referenced is not None:
                node.set(attribute, f"{address}?xsd={quote(referenced, safe='/')}")
        return bytes(lxml.etree.tostring(document, xml_declaration=True, encoding="UTF-8"))

    # -- requests ----------------------------------------------------------------------
    def parse(self, content: bytes, *, action: str | None = None,
              hint: str = SOAP11) -> SoapCall:
        """The call in a request envelope, checked against the WSDL (ClientFault).
        ``action``: its SOAPAction, unquoted; ``hint``: the envelope to refuse it in."""
        try:
            check_xml(content, self.limits)
        except XmlLimitExceeded as exc:
            raise ClientFault(f"the request is refused: {exc}", hint) from exc
        root = self._envelope(content)
        envelope = lxml.etree.QName(root).namespace or ""
        _check_headers(root, envelope)
        body = root.find(f"{{{envelope}}}Body")
        if body is None:
            raise ClientFault(f"the SOAP {_VERSIONS[envelope]} envelope has no Body", envelope)
        children = [child for child in body if isinstance(child.tag, str)]
        if not children:
            raise ClientFault("the Body is empty: it must hold the request element of an "
                              "operation", envelope)
        if len(children) > 1:
            raise ClientFault(f"the Body holds {len(children)} elements "
                              f"({', '.join(str(c.tag) for c in children[:3])}"
                              f"{', ...' if len(children) > 3 else ''}); it must hold one, the "
                              "request element of an operation", envelope)
        operation = self._operation(envelope, children[0].tag)
        self._check_action(operation, action, envelope)
        args = self._arguments(operation, children[0], envelope)
        return SoapCall(operation, args, envelope)

    def _check_action(self, operation: SoapOperation, action: str | None,
                      envelope: str) -> None:
        """A Client fault when the request's action is not ``operation``'s declared one."""
        declared = operation.soapaction or ""
        if not declared or not action or action == declared:
            return
        named = sorted({str(op.name) for (e, _), op in self._operations.items()
                        if e == envelope and op.soapaction == action})
        said = f"names operation {named[0]}" if named else "names no operation of the WSDL"
        raise ClientFault(f"the request's SOAP action {action!r} {said}, but the Body holds the "
                          f"request element of operation {operation.name} (soapAction "
                          f"{declared!r})", envelope)

    def _envelope(self, content: bytes) -> lxml.etree._Element:
        try:
            root = zeep.loader.parse_xml(content,  # type: ignore[arg-type]  # bytes, as above
                                         self._transport, settings=self.settings)
        except (zeep.exceptions.DTDForbidden, zeep.exceptions.EntitiesForbidden) as exc:
            raise ClientFault("XML with a DTD or entity declarations is refused") from exc
        except zeep.exceptions.Error as exc:
            raise ClientFault(f"the request is not well-formed XML: {exc}") from exc
        namespace = lxml.etree.QName(root).namespace
        if root.tag not in (f"{{{SOAP11}}}Envelope", f"{{{SOAP12}}}Envelope"):
            raise ClientFault(f"not a SOAP envelope: the root element is {root.tag}; expected "
                              f"{{{SOAP11}}}Envelope (SOAP 1.1) or {{{SOAP12}}}Envelope "
                              "(SOAP 1.2)", SOAP12 if namespace == SOAP12 else SOAP11)
        return root

    def _operation(self, envelope: str, tag: str) -> SoapOperation:
        operation = self._operations.get((envelope, tag))
        if operation is not None:
            return operation
        version = _VERSIONS[envelope]
        if not any(e == envelope for e, _ in self._operations):
            raise ClientFault(f"the WSDL binds no operation for SOAP {version}; send SOAP "
                              f"{' or '.join(self.versions())}", envelope)
        raise ClientFault(f"{tag} is not the request element of an operation the WSDL binds "
                          f"for SOAP {version} (operations: {', '.join(self.operation_names)})",
                          envelope)

    def _arguments(self, operation: SoapOperation, element: Any, envelope: str
                   ) -> dict[str, Any]:
        body = operation.input.body
        try:
            value = body.parse(element, self._types, context=XmlParserContext(self.settings))
            body.render(lxml.etree.Element("check"), value)  # refuses what parse let by
        except (zeep.exceptions.Error, ValueError, TypeError) as exc:
            raise ClientFault(f"the request of operation {operation.name} does not fit the "
                              f"WSDL: {exc}", envelope) from exc
        args = to_json_value(value)
        return dict(args) if isinstance(args, Mapping) else {"value": args}

    # -- responses ---------------------------------------------------------------------
    def response(self, call: SoapCall, result: Any) -> bytes:
        """The output envelope of ``call`` holding ``result``; ValueError if it does not fit."""
        output = call.operation.output
        if output is None or output.body is None:
            return _serialized(output.serialize() if output is not None else None, call)
        try:
            if isinstance(result, Mapping) and _fields(output.body) >= set(result):
                message = output.serialize(**result)
            elif result is None:
                message = output.serialize()
            else:
                message = output.serialize(result)
            return _serialized(message, call)
        except (zeep.exceptions.Error, TypeError, ValueError) as exc:
            raise ValueError(f"the target's result does not fit the output of operation "
                             f"{call.name}: {exc}") from exc


def _check_headers(root: Any, envelope: str) -> None:
    """A ``MustUnderstand`` fault for a mustUnderstand header block addressed to us."""
    header = root.find(f"{{{envelope}}}Header")
    if header is None:
        return
    attribute, ours = _ROLES[envelope]
    for block in header:
        if not isinstance(block.tag, str):
            continue
        must = (block.get(f"{{{envelope}}}mustUnderstand") or "").strip()
        role = block.get(f"{{{envelope}}}{attribute}")
        if must in ("1", "true") and (role is None or role.strip() in ours):
            raise ClientFault(f"the header block {block.tag} is marked mustUnderstand, and "
                              "this service understands no header block (it passes only the "
                              "Body to its target)", envelope, code="MustUnderstand")


def _references(document: Any) -> Iterator[tuple[Any, str, str]]:
    """``(element, attribute, location)`` of every reference to another document."""
    for namespace, tag, attribute in REFERENCES:
        for node in document.iter(f"{{{namespace}}}{tag}"):
            location = node.get(attribute)
            if location:
                yield node, attribute, location


def _name_of(root: str, path: str, location: str) -> str | None:
    """The served name of ``location`` referenced from the document at ``path``: its path
    from the WSDL's directory ``root``, posix; None for a URL or anything outside ``root``
    (zeep refused those when it loaded the WSDL)."""
    if origin_of(location) is not None:
        return None
    local = local_path(location) if location.startswith("file:") else \
        os.path.normpath(os.path.join(os.path.dirname(path), location))
    if local is None:
        return None
    real = os.path.realpath(local)
    if os.path.commonpath([real, root]) != root or real == root:
        return None
    return posixpath.join(*os.path.relpath(real, root).split(os.sep))


def _fields(body: Any) -> set[str]:
    elements = getattr(getattr(body, "type", None), "elements", None) or []
    return {name for name, _ in elements}


def _serialized(message: Any, call: SoapCall) -> bytes:
    if message is None:
        maker = ElementMaker(namespace=call.envelope, nsmap={"soap-env": call.envelope})
        return bytes(lxml.etree.tostring(maker.Envelope(maker.Body()), xml_declaration=True,
                                         encoding="UTF-8"))
    return bytes(lxml.etree.tostring(message.content, xml_declaration=True, encoding="UTF-8"))


def fault_envelope(envelope: str, code: str, text: str) -> bytes:
    """A fault in ``envelope``'s SOAP version: ``code`` ``Client`` or ``Server`` (SOAP 1.2:
    ``Sender`` or ``Receiver``), ``text`` its faultstring / Reason."""
    soap = ElementMaker(namespace=envelope, nsmap={"soap-env": envelope})
    if envelope == SOAP12:
        value = {"Client": "Sender", "Server": "Receiver"}.get(code, code)
        reason = soap.Text(text)
        reason.set("{http://www.w3.org/XML/1998/namespace}lang", "en")
        fault = soap.Fault(soap.Code(soap.Value(f"soap-env:{value}")), soap.Reason(reason))
    else:
        plain = ElementMaker()
        fault = soap.Fault(plain.faultcode(f"soap-env:{code}"), plain.faultstring(text))
    return bytes(lxml.etree.tostring(soap.Envelope(soap.Body(fault)), xml_declaration=True,
                                     encoding="UTF-8"))
