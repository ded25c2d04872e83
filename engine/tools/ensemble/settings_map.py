"""The setting table: each Ensemble setting Encore has, the Encore setting it becomes and
how its text is read; and the settings Encore does without, or has no equivalent of, with
the reason the report gives. Host and Adapter targets alike: an Encore item holds both in
one table.

Settings made of several Ensemble ones (an adapter's address, a proxy, a PEX host's
remote settings, a router's rule class) are mapped in :mod:`.mapping`; docs/migrating.md
lists every row, and a test keeps the two the same.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


def number(text: str) -> int | float:
    """``"7"`` → 7, ``"2.5"`` → 2.5, ``"-1"`` → -1; ValueError for anything else."""
    value = float(text)
    return int(value) if value.is_integer() else value


def integer(text: str) -> int:
    value = number(text)
    if not isinstance(value, int):
        raise ValueError(f"{text!r} is not a whole number")
    return value


def boolean(text: str) -> bool:
    """Ensemble writes ``1``/``0`` (and ``true``/``false`` in attributes)."""
    lowered = text.strip().lower()
    if lowered in ("1", "true"):
        return True
    if lowered in ("0", "false"):
        return False
    raise ValueError(f"{text!r} is not 1, 0, true or false")


def text(value: str) -> str:
    return value


def throttle(text: str) -> str:
    """``ThrottleDelay`` (milliseconds between two messages) as a ``rate_limit``."""
    delay = number(text)
    if delay <= 0:
        raise ValueError("0 means no throttling")
    per_minute = 60_000 / delay
    if not float(per_minute).is_integer():
        raise ValueError(f"{delay} ms between messages is not a whole number of messages "
                         "per minute")
    return f"{int(per_minute)}/min"


@dataclass(frozen=True)
class SettingRule:
    """Ensemble setting → Encore setting ``encore``, its text read by ``read``."""

    encore: str
    read: Callable[[str], Any]
    note: str = ""


SETTING_TABLE: Mapping[str, SettingRule] = {
    "ResponseTimeout": SettingRule("response_timeout", number, "-1 = wait for ever"),
    "ConnectTimeout": SettingRule("connect_timeout", number),
    "RetryInterval": SettingRule("retry_interval", number),
    "FailureTimeout": SettingRule("failure_timeout", number, "-1 = retry for ever"),
    "ReplyCodeActions": SettingRule("reply_code_actions", text, "the same syntax"),
    "AlertOnError": SettingRule("alert_on_error", boolean),
    "AlertRetryGracePeriod": SettingRule("alert_retry_grace_period", number),
    "QueueCountAlert": SettingRule("queue_count_alert", integer),
    "QueueWaitAlert": SettingRule("queue_wait_alert", number),
    "Credentials": SettingRule("credentials", text,
                               "a credentials name: define it in the environment or the "
                               "credentials file (docs/security.md#credentials)"),
    "SSLCheckServerIdentity": SettingRule("ssl_verify", boolean,
                                          "Encore checks the host name whenever it verifies"),
    "ThrottleDelay": SettingRule("rate_limit", throttle, "milliseconds between messages → "
                                 "messages per minute"),
}

# Settings of several parts, mapped together (:mod:`.mapping`): name → what they become.
COMPOSITE_SETTINGS: Mapping[str, str] = {
    "HTTPServer": "url (HTTP) or servers and wsdl (SOAP): scheme://HTTPServer:HTTPPort/URL",
    "HTTPPort": "the port of url / servers",
    "URL": "the path of url / servers",
    "SSLConfig": "https:// in url / servers when set",
    "WebServiceURL": "servers = [WebServiceURL] and wsdl = WebServiceURL + '?wsdl'",
    "ProxyServer": "proxy = http://ProxyServer:ProxyPort",
    "ProxyPort": "the port of proxy",
    "ProxyHTTPS": "https:// in proxy when 1",
    "TargetConfigName": "target (SoapService), the routes' target (HttpService), "
                        "targets (a service skeleton)",
    "TargetConfigNames": "targets (a service skeleton) or target_config_names (a process "
                         "skeleton)",
    "BusinessRuleName": "rules and default_target of the router, when the rule class is in "
                        "the source and its rules are simple",
    "Port": "[inbound] port (one port serves every inbound service)",
    "%remoteSettings": "the PEX skeleton's own settings, one per name=value line",
    "%remoteClassname": "the PEX skeleton's class name",
}

# Settings Encore does without: name → why.
NOT_NEEDED: Mapping[str, str] = {
    "WebServiceClientClass": "Encore reads the WSDL itself (wsdl); no generated client class",
    "%gatewayName": "Encore runs Python hosts in its own process: no gateway",
    "%gatewayHost": "Encore runs Python hosts in its own process: no gateway",
    "%gatewayPort": "Encore runs Python hosts in its own process: no gateway",
    "%gatewayTimeout": "Encore runs Python hosts in its own process: no gateway",
    "%useHostConnection": "Encore runs Python hosts in its own process: no gateway",
    "%gatewayExtraClasspaths": "Encore imports the skeleton from the package beside the "
                               "production",
    "%classpaths": "Encore imports the skeleton from the package beside the production",
    "%module": "the skeleton's module (the original Python class is named in it)",
    "%classname": "the skeleton's class (the original Python class is named in it)",
    "ArchiveIO": "every attempt is kept in message_attempt, and the messages in message_header",
    "SendSuperSession": "every message of a session carries its session id",
    "ForceSyncSend": "a router always waits for its target's response",
    "ResponseFrom": "a router answers with its target's response",
    "ProxyHttpTunnel": "HTTPS goes through a proxy by CONNECT always",
}

# Settings Encore has no equivalent of: name → why.
NO_EQUIVALENT: Mapping[str, str] = {
    "AlertGroups": "Encore sends every Alert to one alert_item ([production])",
    "BusinessPartner": "Encore keeps no business partner profiles",
    "InactivityTimeout": "Encore has no inactivity status for an item",
    "AlertGracePeriod": "Encore alerts on errors with alert_retry_grace_period only",
    "LocalInterface": "Encore lets the operating system choose the local interface",
    "WriteTimeout": "the whole attempt, writing included, is bounded by response_timeout",
    "SOAPCredentials": "WS-Security credentials: set credentials with auth = 'wsse'",
    "Validation": "Encore validates bodies against the item's request class",
    "RuleLogging": "with trace = true the router logs which rule matched",
    "ActOnTransformError": "Encore's router has no transformations",
    "ActOnValidationError": "Encore's router has no validation step",
    "AlertOnBadMessage": "Encore's router has no validation step",
    "BadMessageHandler": "Encore's router has no validation step",
    "ResponseTargetConfigNames": "a router answers its caller only",
}

# Ensemble's defaults of the settings Encore reports a default for, for the report.
ENSEMBLE_DEFAULTS: Mapping[str, Any] = {
    "response_timeout": 30,
    "connect_timeout": 5,
    "retry_interval": 5,
    "failure_timeout": 15,
    "reply_code_actions": "E=F",
}
