"""The UDL form: a class as exported to source control (``Demo.Production.cls``)::

    Class Demo.Production Extends Ens.Production
    {
    XData ProductionDefinition
    {
    <Production Name="Demo.Production"> … </Production>
    }
    }

Only what the importer needs is read: the class name and supers, and its members'
headers and bodies (``Parameter``, ``Property``, ``Method``/``ClassMethod``, ``XData``),
bodies by brace matching that skips ObjectScript strings and comments.
"""
from __future__ import annotations

import re

from engine.tools.ensemble.errors import SourceError
from engine.tools.ensemble.model import EnsClass, EnsMethod, EnsProperty

_HEADER = re.compile(r"^\s*Class\s+([%\w.]+)(?:\s+Extends\s+(\([^)]*\)|[%\w.]+))?", re.M)
_MEMBER = re.compile(r"^(Parameter|Property|Method|ClassMethod|XData|Query|Index|Storage|"
                     r"Trigger|ForeignKey|Projection)\s+([%\w]+)", re.M)
_PARAMETER = re.compile(r"\s*(?:As\s+[%\w.]+\s*)?(?:\[[^\]]*\]\s*)?=\s*(.*?);\s*$", re.S)
_PROPERTY_TYPE = re.compile(r"\s+As\s+(?:list\s+Of\s+|array\s+Of\s+)?([%\w.]+)", re.I)
_INITIAL = re.compile(r"InitialExpression\s*=\s*(\"(?:[^\"]|\"\")*\"|[^,\]]+)")
_METHOD = re.compile(r"\s*\((.*?)\)\s*(?:As\s+([%\w.]+))?", re.S)


def read_udl(text: str, where: str) -> EnsClass:
    """The class in UDL ``text``; SourceError naming ``where`` if there is none."""
    header = _HEADER.search(text)
    if header is None:
        raise SourceError(f"{where} is neither XML nor a class in UDL (no 'Class Name "
                          "Extends …' line)")
    supers = tuple(s.strip() for s in header.group(2).strip("()").split(",")
                   if s.strip()) if header.group(2) else ()
    start = text.find("{", header.end())
    if start < 0:
        raise SourceError(f"{where}: class {header.group(1)} has no body")
    end = _matching_brace(text, start, code=False)
    body = text[start + 1:end]
    parameters: dict[str, str] = {}
    properties: list[EnsProperty] = []
    methods: list[EnsMethod] = []
    xdata: dict[str, str] = {}
    pos = 0
    while (member := _MEMBER.search(body, pos)) is not None:
        kind, name = member.group(1), member.group(2)
        pos = member.end()
        if kind == "Parameter":
            stop = body.find(";", pos)
            found = _PARAMETER.match(body[pos:stop + 1]) if stop >= 0 else None
            if found:
                parameters[name] = _unquote(found.group(1).strip())
            pos = stop + 1 if stop >= 0 else pos
        elif kind == "Property":
            stop = body.find(";", pos)
            declaration = body[pos:stop]
            kind_of = _PROPERTY_TYPE.match(declaration)
            initial = _INITIAL.search(declaration)
            properties.append(EnsProperty(name=name, type=kind_of.group(1) if kind_of
                                          else "%String",
                                          initial=initial.group(1).strip() if initial else None))
            pos = stop + 1 if stop >= 0 else pos
        elif kind in ("Method", "ClassMethod", "XData", "Query", "Trigger", "Storage"):
            open_at = body.find("{", pos)
            if open_at < 0:
                break
            close_at = _matching_brace(body, open_at, code=kind != "XData")
            inner = body[open_at + 1:close_at].strip("\n")
            if kind in ("Method", "ClassMethod"):
                signature = _METHOD.match(body[pos:open_at])
                methods.append(EnsMethod(name=name,
                                         spec=signature.group(1) if signature else "",
                                         returns=(signature.group(2) or "") if signature else "",
                                         body=inner))
            elif kind == "XData":
                xdata[name] = inner
            pos = close_at + 1
    return EnsClass(name=header.group(1), supers=supers, parameters=parameters,
                    properties=tuple(properties), methods=tuple(methods), xdata=xdata)


def _matching_brace(text: str, open_at: int, *, code: bool) -> int:
    """The index of the ``}`` closing the ``{`` at ``open_at``. In ``code`` (ObjectScript)
    braces inside "strings" (``""`` escapes a quote) and // or /* */ comments do not count;
    in an XData (XML) only strings are skipped."""
    depth = 0
    i = open_at
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            close = text.find('"', i + 1)
            i = n if close < 0 else close + 1
            continue
        if code and text.startswith("//", i):
            i = _line_end(text, i)
            continue
        if code and text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = n if close < 0 else close + 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise SourceError(f"unbalanced braces from offset {open_at}: a '{{' is never closed")


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def _unquote(value: str) -> str:
    """An ObjectScript string literal's text (``"a""b"`` → ``a"b``); other text as it is."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('""', '"')
    return value
