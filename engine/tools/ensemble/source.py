"""Reading an Ensemble source: a file in any of the three forms a production is kept in,
or a directory of them (a source-control checkout, one class per file), into an
:class:`~engine.tools.ensemble.model.EnsembleSource`; and choosing its production."""
from __future__ import annotations

from pathlib import Path

from engine.tools.ensemble.errors import SourceError
from engine.tools.ensemble.model import EnsClass, EnsembleSource, EnsProduction
from engine.tools.ensemble.udl import read_udl
from engine.tools.ensemble.xml_export import (
    MAX_SOURCE_BYTES,
    classes_of_export,
    parse_xml,
    production_element,
    production_of,
)

SOURCE_SUFFIXES = (".cls", ".xml", ".udl")  # what a directory source is read from
MAX_SOURCE_FILES = 5000  # files of one directory source


def read_source(path: Path) -> EnsembleSource:
    """Every production and class in ``path`` (a file, or a directory read recursively for
    ``.cls``, ``.udl`` and ``.xml`` files); SourceError naming the file otherwise."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix.lower() in SOURCE_SUFFIXES
                       and p.is_file())
        if not files:
            raise SourceError(f"{path} holds no .cls, .udl or .xml file")
        if len(files) > MAX_SOURCE_FILES:
            raise SourceError(f"{path} holds {len(files)} source files; at most "
                              f"{MAX_SOURCE_FILES} are read: name the production's own file "
                              "or a smaller directory")
    elif path.is_file():
        files = [path]
    else:
        raise SourceError(f"{path} does not exist (expected a .cls or .xml file, or a "
                          "directory of them)")
    productions: list[EnsProduction] = []
    classes: dict[str, EnsClass] = {}
    for file in files:
        found_productions, found_classes = _read_file(file)
        productions.extend(found_productions)
        classes.update({c.name: c for c in found_classes})
    if not productions:
        raise SourceError(f"no production in {path}: expected a class with "
                          "'XData ProductionDefinition', or a <Production> document")
    return EnsembleSource(productions=tuple(productions), classes=classes)


def choose_production(source: EnsembleSource, name: str | None) -> EnsProduction:
    """The production ``name`` (its class or its ``Name``); the only one when ``name`` is
    None. SourceError listing them when there are several and none, or another, is named."""
    listed = ", ".join(p.class_name for p in source.productions)
    if name is None:
        if len(source.productions) == 1:
            return source.productions[0]
        raise SourceError(f"the source holds {len(source.productions)} productions "
                          f"({listed}); choose one with --production NAME")
    for production in source.productions:
        if name in (production.class_name, production.name):
            return production
    raise SourceError(f"no production named {name!r} in the source (productions: {listed})")


def _read_file(file: Path) -> tuple[list[EnsProduction], list[EnsClass]]:
    size = file.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise SourceError(f"{file} has {size} bytes; a production source has at most "
                          f"{MAX_SOURCE_BYTES}")
    data = file.read_bytes()
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    where = str(file)
    if head.startswith(b"<"):
        root = parse_xml(data, where)
        if root.tag == "Production":
            return [production_of(root, None)], []
        if root.tag != "Export":
            raise SourceError(f"{where}: an XML source is an <Export> or a <Production>, "
                              f"not <{root.tag}>")
        classes = classes_of_export(root, where)
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SourceError(f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                              f"offset {exc.start})") from exc
        classes = [read_udl(text.replace("\r\n", "\n"), where)]
    productions = []
    for cls in classes:
        element = production_element(cls, where)
        if element is not None:
            productions.append(production_of(element, cls.name))
    return productions, classes
