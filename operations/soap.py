"""SoapOperation: calls a WSDL operation through a SoapAdapter."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zeep.helpers import serialize_object

from adapters.soap import SoapAdapter
from engine.host import BusinessOperation
from engine.message import Message
from operations.soap_intake import check_soap_call


@dataclass
class SoapRequest(Message):
    """``{"operation": "<WSDL operation>", "args": {...}}``."""

    operation: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class SoapResponse(Message):
    """``{"result": ...}``: the zeep result as JSON."""

    result: Any = None


class SoapOperation(BusinessOperation):
    """Invokes ``request.operation`` with ``request.args`` on the item's WSDL."""

    adapter_class = SoapAdapter
    request_class = SoapRequest

    @classmethod
    def check_request(cls, request: Message, *, name: str, settings: Mapping[str, Any]) -> None:
        """Refuse a request that does not fit the item's WSDL."""
        if isinstance(request, SoapRequest):
            check_soap_call(name, settings, request.operation, request.args)

    def on_message(self, request: SoapRequest) -> SoapResponse:
        assert isinstance(self.adapter, SoapAdapter)
        result = self.adapter.invoke(request.operation, request.args)
        return SoapResponse(result=to_json_value(result))


def to_json_value(result: Any) -> Any:
    """A zeep result as plain JSON values (dates and decimals as strings)."""
    return json.loads(json.dumps(serialize_object(result), default=str))
