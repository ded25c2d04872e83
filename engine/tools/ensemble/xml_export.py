"""The XML forms: an ``<Export>`` of classes (as Studio and ``$system.OBJ.Export`` write it)
and a bare ``<Production>`` document.

Sources come from outside: the parser resolves no entities, loads no DTD and reaches no
network, and a document with a DOCTYPE is refused outright (no billion laughs, no XXE).
"""
from __future__ import annotations

from lxml import etree

from engine.tools.ensemble.errors import SourceError
from engine.tools.ensemble.model import (
    EnsClass,
    EnsItem,
    EnsMethod,
    EnsProduction,
    EnsProperty,
    EnsSetting,
)

MAX_SOURCE_BYTES = 50 * 1024 * 1024  # bytes of one source file: a production is far smaller


def parse_xml(data: bytes, where: str) -> etree._Element:
    """The root element of ``data``; SourceError naming ``where`` for bad or hostile XML."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             dtd_validation=False, huge_tree=False, remove_comments=True,
                             remove_pis=True)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise SourceError(f"{where} is not well-formed XML: {exc}") from exc
    if root.getroottree().docinfo.doctype:
        raise SourceError(f"{where} has a DOCTYPE; a production export has none, and "
                          "DTDs and entities are refused")
    return root


def production_of(element: etree._Element, class_name: str | None) -> EnsProduction:
    """The ``<Production>`` element read; ``class_name``: the class holding it (None for
    a bare document: its ``Name``)."""
    name = element.get("Name", "")
    settings = tuple(_setting(s) for s in element.findall("Setting"))
    items = tuple(_item(i, name) for i in element.findall("Item"))
    return EnsProduction(class_name=class_name or name, name=name,
                         attributes=dict(element.attrib),
                         description=(element.findtext("Description") or "").strip(),
                         actor_pool_size=_text(element.find("ActorPoolSize")),
                         settings=settings, items=items)


def classes_of_export(root: etree._Element, where: str) -> list[EnsClass]:
    """Every ``<Class>`` of an ``<Export>``."""
    return [_class(c, where) for c in root.findall("Class")]


def production_element(cls: EnsClass, where: str) -> etree._Element | None:
    """The ``<Production>`` of a class's ``XData ProductionDefinition``, None without one."""
    text = cls.xdata.get("ProductionDefinition")
    if text is None:
        return None
    root = parse_xml(text.strip().encode("utf-8"), f"{where}, class {cls.name}")
    if root.tag != "Production":
        raise SourceError(f"{where}, class {cls.name}: XData ProductionDefinition holds "
                          f"<{root.tag}>, not <Production>")
    return root


def _item(element: etree._Element, production: str) -> EnsItem:
    name = element.get("Name")
    class_name = element.get("ClassName")
    if not name or not class_name:
        raise SourceError(f"production {production!r}: an <Item> without "
                          f"{'Name' if not name else 'ClassName'} "
                          f"({etree.tostring(element, encoding='unicode')[:120]}…)")
    return EnsItem(name=name, class_name=class_name, attributes=dict(element.attrib),
                   settings=tuple(_setting(s) for s in element.findall("Setting")))


def _setting(element: etree._Element) -> EnsSetting:
    return EnsSetting(target=element.get("Target", "Host"), name=element.get("Name", ""),
                      value=(element.text or "").strip())


def _class(element: etree._Element, where: str) -> EnsClass:
    name = element.get("name")
    if not name:
        raise SourceError(f"{where}: a <Class> without a name")
    supers = tuple(s.strip() for s in (element.findtext("Super") or "").split(",") if s.strip())
    parameters = {p.get("name", ""): (p.findtext("Default") or "") for p in
                  element.findall("Parameter")}
    properties = tuple(EnsProperty(name=p.get("name", ""), type=p.findtext("Type") or "%String",
                                   initial=p.findtext("InitialExpression"))
                       for p in element.findall("Property"))
    methods = tuple(EnsMethod(name=m.get("name", ""), spec=m.findtext("FormalSpec") or "",
                              returns=m.findtext("ReturnType") or "",
                              body=(m.findtext("Implementation") or "").strip("\n"))
                    for m in (*element.findall("Method"), *element.findall("ClassMethod")))
    xdata = {x.get("name", ""): _xdata_text(x) for x in element.findall("XData")}
    return EnsClass(name=name, supers=supers, parameters=parameters, properties=properties,
                    methods=methods, xdata=xdata)


def _xdata_text(element: etree._Element) -> str:
    """An XData's document: its ``<Data>`` as CDATA text, or inline elements."""
    data = element.find("Data")
    if data is None:
        return ""
    children = list(data)
    if children:
        return "".join(etree.tostring(c, encoding="unicode", with_tail=False) for c in children)
    return data.text or ""


def _text(element: etree._Element | None) -> str | None:
    return None if element is None else (element.text or "").strip()
