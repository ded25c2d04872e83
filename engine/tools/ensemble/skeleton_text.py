"""The text of a skeleton module (:mod:`.skeletons` decides what it holds).

Everything taken from the source goes into the module as a string literal (``repr``) or as
a comment cut at every line break, and names as ASCII identifiers: a hostile source cannot
put code in it.
"""
from __future__ import annotations

import textwrap

from engine.tools.ensemble.classes import HTTP, OPERATION, PROCESS, SOAP
from engine.tools.ensemble.skeleton_spec import SkeletonSpec

_BASES = {OPERATION: "BusinessOperation", PROCESS: "BusinessProcess",
          "service": "BusinessService"}
_ADAPTERS = {SOAP: ("adapters.soap", "SoapAdapter"), HTTP: ("adapters.http", "HttpAdapter")}
_ADAPTER_HINTS = {
    HTTP: "Its adapter: self.adapter.send(method, path, json=...) returns the reply "
          "(.status, .text, .content).",
    SOAP: "Its adapter: self.adapter.invoke(operation, args) returns the WSDL operation's "
          "result.",
}
_HOOKS = {
    OPERATION: ("on_message", "request: Any", "Any", "return the response (a dict, or a "
                "Message), or raise to fail the attempt"),
    PROCESS: ("on_request", "request: Any", "Any", "call other items with "
              "self.send_request_sync(target, message) or send_request_async"),
    "service": ("on_process_input", "", "None", "send what it finds with "
                "self.send(target, message)"),
}


def comment(text: str, indent: str) -> list[str]:
    """``text`` as comment lines (every line break of any kind ends a line)."""
    return [f"{indent}# {_printable(line)}".rstrip() for line in text.splitlines() or [""]]


def _printable(line: str) -> str:
    """``line`` with what a source file cannot hold (NUL, control characters, lone
    surrogates) as ``?``; tabs kept."""
    return "".join(c if (c.isprintable() or c == "\t") and not 0xD800 <= ord(c) <= 0xDFFF
                   else "?" for c in line)


def render(spec: SkeletonSpec) -> str:
    """The module text of ``spec``."""
    base = _BASES[spec.kind]
    hook, args, returns, how = _HOOKS[spec.kind]
    lines = [f'"""Skeleton written by `encore import ensemble` for {spec.class_name}.',
             "",
             "TODO: rewrite its Ensemble logic in Python (docs/migrating.md, Skeletons). Until",
             "then it loads and runs, and " + ("every message it gets ends in Error saying so."
                                             if spec.kind != "service" else
                                             "it writes one Warning event when it starts."),
             '"""',
             "from __future__ import annotations", "", "from typing import Any", ""]
    if spec.adapter in _ADAPTERS:
        module, name = _ADAPTERS[spec.adapter]
        lines.append(f"from {module} import {name}")
    lines += [f"from engine import {base}", "from engine.settings import Setting", "", ""]
    lines += ["# Its own settings, as the production file sets them (Ensemble's CamelCase names",
              "# are accepted too).", "OWN_SETTINGS: tuple[Setting, ...] = ("]
    for own in spec.own.values():
        lines.append(f"    Setting(name={own.name!r}, kind={own.kind.__name__}, "
                     f"default={own.default!r},")
        lines.append(f"            help={own.help!r}),")
    if spec.kind == PROCESS:
        lines.append("    Setting(name='target_config_names', kind=list, default=[],")
        lines.append("            help=\"Ensemble's TargetConfigNames\"),")
    lines += [")", "", ""]
    lines.append(f"class {spec.class_name}({base}):")
    doc = f"Ensemble: {spec.ensemble} (items: {', '.join(spec.items)})"
    lines.append(f"    {doc!r}")
    lines.append("")
    if spec.adapter in _ADAPTERS:
        lines.append(f"    adapter_class = {_ADAPTERS[spec.adapter][1]}")
    lines.append(f"    SETTINGS = (*{base}.SETTINGS, *OWN_SETTINGS)")
    lines.append("")
    if spec.kind == "service":
        lines += ["    def on_init(self) -> None:",
                  "        self.log_warning(f\"{self.name} is a skeleton: its Ensemble logic is "
                  "not rewritten yet\")", ""]
    lines.append(f"    def {hook}(self{', ' + args if args else ''}) -> {returns}:")
    todo = f"TODO: rewrite {spec.ensemble} in Python. Its settings are in self.settings; {how}."
    if spec.adapter in _ADAPTER_HINTS:
        todo += " " + _ADAPTER_HINTS[spec.adapter]
    lines += comment(textwrap.fill(todo, 86), "        ")
    for note in spec.notes:
        lines += comment(note, "        ")
    lines += _source_comments(spec)
    if spec.kind == "service":
        lines.append("        return None")
    else:
        refusal = (f"{spec.class_name} is a skeleton: the logic of {spec.ensemble} is not "
                   "rewritten yet")
        lines += ["        raise NotImplementedError(", f"            {refusal!r})"]
    return "\n".join(lines) + "\n"


def _source_comments(spec: SkeletonSpec) -> list[str]:
    """The class's ObjectScript methods and message map, as comments to rewrite from."""
    if spec.source is None:
        return []
    out: list[str] = []
    message_map = spec.source.xdata.get("MessageMap")
    if message_map:
        out += comment("", "        ") + comment("XData MessageMap:", "        ")
        out += comment(message_map.strip("\n"), "        ")
    for method in spec.source.methods:
        out += comment("", "        ")
        out += comment(f"Method {method.name}({method.spec})"
                       + (f" As {method.returns}" if method.returns else ""), "        ")
        out += comment(method.body, "        ")
    return out
