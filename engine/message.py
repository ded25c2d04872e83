"""Messages: dataclasses serialised as JSON, stored by class name (``module:Class``)."""
from __future__ import annotations

import dataclasses
import importlib
import json
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from engine.errors import MessageError

M = TypeVar("M", bound="Message")

# Every JSON codec and any code that walks a body recurses per level: deeper bodies are
# refused before they hit Python's recursion limit.
MAX_BODY_DEPTH = 100


@dataclasses.dataclass
class Message:
    """Base of message classes. Subclasses are ``@dataclass`` with JSON-friendly fields."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values, as :func:`dataclasses.asdict` makes them."""
        return {name: _plain(getattr(self, name)) for name in _shape(type(self)).names}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), default=str)

    @classmethod
    def class_name(cls) -> str:
        return f"{cls.__module__}:{cls.__qualname__}"

    @classmethod
    def from_dict(cls: type[M], data: Any) -> M:
        """Build from a decoded JSON object; refuse unknown or missing fields and wrong types."""
        if not isinstance(data, Mapping):
            raise MessageError(f"{cls.__name__}: body must be a JSON object, "
                               f"got {type(data).__name__}")
        shape = _shape(cls)
        if not shape.known.issuperset(data):
            unknown = sorted(set(data) - shape.known)
            raise MessageError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}; "
                               f"allowed: {', '.join(shape.names) or 'none'}")
        for name in shape.names:
            if name not in data:
                if name in shape.required:
                    raise MessageError(f"{cls.__name__}: missing required field {name!r}")
            elif not _fits(data[name], shape.hints.get(name, Any)):
                raise MessageError(f"{cls.__name__}: field {name!r} must be "
                                   f"{_type_text(shape.hints[name])}, "
                                   f"got {type(data[name]).__name__}")
        return cls(**dict(data))

    @classmethod
    def from_json(cls: type[M], text: str) -> M:
        return cls.from_dict(decode_json(text))


@dataclasses.dataclass
class JsonMessage(Message):
    """Any JSON object, kept as it is; any other JSON value (a string too) is refused."""

    data: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)

    @classmethod
    def from_dict(cls, data: Any) -> JsonMessage:
        if not isinstance(data, Mapping):
            raise MessageError(f"body must be a JSON object, got {type(data).__name__}")
        return cls(data=dict(data))


def decode_json(text: str) -> Any:
    """``text`` as JSON; MessageError if it is not JSON or nests too deep to decode."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise MessageError(f"body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise _too_deep() from exc


def encode_request(message: Message) -> str:
    """The JSON text stored for request ``message``; MessageError if it cannot be JSON."""
    try:
        data = message.to_dict()
    except RecursionError as exc:  # a value holding itself
        raise _too_deep() from exc
    if _depth_over(data, MAX_BODY_DEPTH):
        raise _too_deep()
    try:
        return json.dumps(data, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError as exc:
        raise MessageError(f"body holds NaN or an infinity, which JSON does not have: "
                           f"{exc}") from exc


def _too_deep() -> MessageError:
    return MessageError(f"body nests arrays and objects more than {MAX_BODY_DEPTH} levels deep")


def _depth_over(data: Any, limit: int) -> bool:
    """True if ``data`` nests more than ``limit`` levels deep (iteratively, for the stack)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, Mapping):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, (Mapping, list, tuple)))
    return False


def load_message_class(name: str) -> type[Message]:
    """Resolve ``module:Class`` to a Message subclass."""
    module_name, _, attr = name.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise MessageError(f"message class {name!r} cannot be loaded: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Message)):
        raise MessageError(f"{name!r} is not an engine.Message subclass")
    return cls


def decode_message(body_class: str | None, body: str | None) -> Message:
    """The message stored as (``body_class``, ``body``)."""
    cls = load_message_class(body_class) if body_class else JsonMessage
    return cls.from_json(body or "{}")


def encode_response(response: Any) -> tuple[str | None, str | None]:
    """(body_class, JSON body) for what an operation returned (None: no response)."""
    if response is None:
        return None, None
    if isinstance(response, Message):
        return type(response).class_name(), response.to_json()
    return JsonMessage.class_name(), json.dumps(response, separators=(",", ":"), default=str)


def _fits(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint) or hint
    if hint is Any or origin is typing.Union or origin is __import__("types").UnionType:
        args = typing.get_args(hint)
        return hint is Any or any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin in (list, tuple):
        return isinstance(value, list)
    if origin in (dict, Mapping):
        return isinstance(value, dict)
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(origin, type):
        return isinstance(value, origin)
    return True


def _type_text(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint))


@dataclasses.dataclass(frozen=True)
class _Shape:
    """What validating a body needs to know of its message class."""

    names: tuple[str, ...]
    known: frozenset[str]
    required: frozenset[str]
    hints: dict[str, Any]


_SHAPES: dict[type, _Shape] = {}


def _shape(cls: type) -> _Shape:
    """Read once per class, not per message (intake validates every body)."""
    shape = _SHAPES.get(cls)
    if shape is None:
        fields = dataclasses.fields(cls)
        names = tuple(f.name for f in fields)
        shape = _SHAPES[cls] = _Shape(
            names=names, known=frozenset(names),
            required=frozenset(f.name for f in fields if f.default is dataclasses.MISSING
                               and f.default_factory is dataclasses.MISSING),
            hints=typing.get_type_hints(cls))
    return shape


_ATOMS = (str, int, float, bool, type(None))


@dataclasses.dataclass
class _Box:
    value: Any


def _plain(value: Any) -> Any:
    """``value`` as :func:`dataclasses.asdict` copies it, JSON's own types at a fraction of
    the cost."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    if kind is list:
        return [_plain(v) for v in value]
    return dataclasses.asdict(_Box(value))["value"]
