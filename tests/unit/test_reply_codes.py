"""Ensemble reply code actions: parsing (with error positions) and evaluation precedence."""
from __future__ import annotations

import pytest

from engine.errors import (
    ConfigurationError,
    ConnectFailed,
    ConnectionReset,
    HttpStatusError,
    RemoteFault,
    ResponseTimeout,
)
from engine.retry import (
    DEFAULT_REPLY_CODE_ACTIONS,
    RETRY_SETTINGS,
    Actions,
    ReplyCode,
    ReplyCodeActions,
    check_reply_code_actions,
)
from engine.settings import validate_settings

RULES = "E#503=W,E*timeout=RF,(E#404,E#410)=F,X=R,E=S"


def status(code: int) -> HttpStatusError:
    return HttpStatusError(f"HTTP {code}", code=str(code), status_code=code)


def evaluate(text: str, error: BaseException) -> Actions:
    return ReplyCodeActions.parse(text).evaluate(error)


# --- parsing -------------------------------------------------------------------------------------

def test_the_design_example_parses_into_five_rules():
    parsed = ReplyCodeActions.parse("E=R,E#503=W,E*timeout=RF,(E#404,E#410)=F,X=R")
    assert [rule.codes for rule in parsed.rules] == [
        (ReplyCode("E"),), (ReplyCode("E#", "503"),), (ReplyCode("E*", "timeout"),),
        (ReplyCode("E#", "404"), ReplyCode("E#", "410")), (ReplyCode("X"),)]
    assert [rule.actions.letters for rule in parsed.rules] == ["R", "W", "RF", "F", "R"]


def test_actions_combine_in_any_order_and_case():
    assert ReplyCodeActions.parse("e=fwrsdc").rules[0].actions == Actions(
        complete=True, warn=True, retry=True, suspend=True, disable=True, fail=True)


def test_spaces_between_tokens_are_allowed_and_texts_keep_inner_spaces():
    parsed = ReplyCodeActions.parse(" ( E#404 , X ) = R , E*time out = W ")
    assert parsed.rules[0].codes == (ReplyCode("E#", "404"), ReplyCode("X"))
    assert parsed.rules[1].codes == (ReplyCode("E*", "time out"),)


@pytest.mark.parametrize(("text", "position", "expected"), [
    ("", 1, "a reply code"),  # nothing at all
    ("E", 2, "'='"),  # a code with no actions
    ("E=", 3, "actions"),  # '=' with no letters
    ("E=Q", 3, "actions"),  # not an action letter
    ("E=RQ", 4, "',' or the end"),  # a stray letter after valid actions
    ("E#=F", 3, "an error code after 'E#'"),  # empty code
    ("E*=F", 3, "a text after 'E*'"),  # empty text
    ("(E,X=F", 5, "',' or ')'"),  # unclosed list
    ("()=F", 2, "a reply code"),  # empty list
    ("E=F,", 5, "a reply code"),  # trailing comma
    ("Y=F", 1, "a reply code"),  # unknown code letter
    ("E=R,X#5=F", 6, "'='"),  # X takes no code
    ("E=F X=R", 5, "',' or the end"),  # missing comma
])
def test_malformed_actions_are_refused_with_the_position_and_what_was_expected(
        text, position, expected):
    with pytest.raises(ValueError) as info:
        ReplyCodeActions.parse(text)
    message = str(info.value)
    assert f"at character {position} " in message
    assert f"expected {expected}" in message


def test_the_check_returns_the_text_or_raises_with_the_position():
    assert check_reply_code_actions("E#503=R,E=F") == "E#503=R,E=F"
    with pytest.raises(ValueError, match="character 7"):
        check_reply_code_actions("E#503=")


def test_the_setting_refuses_bad_syntax_at_load_time():
    with pytest.raises(ConfigurationError, match=r"'Billing'.*'reply_code_actions'.*character 3"):
        validate_settings("Billing", {"reply_code_actions": "E=Z"}, RETRY_SETTINGS)


# --- evaluation ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("error", "letters"), [
    (status(503), "WS"),  # the W-only rule warns, then the first other match (E=S) decides
    (ResponseTimeout("response timeout after 7 s"), "RF"),  # E*timeout precedes X=R
    (status(404), "F"),  # listed code
    (status(410), "F"),  # second code of the list
    (ConnectFailed("connection refused"), "R"),  # no reply at all
    (RemoteFault("Server busy", fault_code="soap:Server"), "S"),  # only E matches
])
def test_evaluation_precedence(error, letters):
    assert evaluate(RULES, error).letters == letters


def test_warn_only_rules_apply_even_after_the_first_match():
    assert evaluate("E=R,E#503=W", status(503)) == Actions(retry=True, warn=True)
    assert evaluate("E=R,E#503=W", status(500)) == Actions(retry=True)


def test_a_rule_with_w_and_another_action_is_an_ordinary_rule():
    assert evaluate("E=R,E#503=WS", status(503)) == Actions(retry=True)


def test_no_matching_rule_fails_like_the_default():
    assert evaluate("E#404=R", status(500)) == Actions(fail=True)
    assert evaluate("E#503=W", status(503)) == Actions(fail=True, warn=True)
    assert evaluate(DEFAULT_REPLY_CODE_ACTIONS, status(500)) == Actions(fail=True)


def test_codes_and_texts_match_case_insensitively():
    fault = RemoteFault("Invalid Account Number", fault_code="SOAP:Client")
    assert evaluate("E#soap:client=S", fault).suspend
    assert evaluate("E*INVALID ACCOUNT=C", fault).complete


@pytest.mark.parametrize(("rule", "code", "matches"), [
    ("E#Server", "soap11env:Server", True),  # the server's prefix is ignored
    ("E#soap:Server", "soap11env:Server", True),  # so is the rule's
    ("E#{http://schemas.xmlsoap.org/soap/envelope/}Server", "Server", True),  # Clark notation
    ("E#Server", "{urn:x}Server", True),  # a code in Clark notation
    ("E#Client", "soap11env:Client.Refused", True),  # the generic part of a dotted code
    ("E#Client.Refused", "Client", False),  # not the other way round
    ("E#Client", "soap11env:ClientError", False),  # a prefix of the name is not a match
    ("E#Server", "soap11env:Client", False),  # another code
])
def test_qualified_fault_codes_match_by_their_local_name(rule, code, matches):
    fault = RemoteFault("fault", fault_code=code)
    assert evaluate(f"{rule}=R", fault).retry is matches


def test_an_error_class_name_or_base_name_is_a_code():
    assert evaluate("e#responsetimeout=R", ResponseTimeout("t")).retry
    assert evaluate("E#OutcomeUnknown=S", ConnectionReset("reset")).suspend
    assert evaluate("E#ResponseTimeout=R", ConnectionReset("reset")) == Actions(fail=True)


def test_a_status_without_a_code_matches_by_its_status_number():
    assert evaluate("E#429=R", HttpStatusError("slow down", status_code=429)).retry


def test_x_means_no_reply_and_does_not_match_an_answer():
    assert evaluate("X=R", ResponseTimeout("t")).retry
    assert evaluate("X=R", ConnectFailed("refused")).retry
    assert evaluate("X=R", status(503)) == Actions(fail=True)


def test_a_plain_exception_is_matched_by_its_text_and_class():
    assert evaluate("E*boom=R", ValueError("Boom!")).retry
    assert evaluate("E#ValueError=S", ValueError("x")).suspend
    assert evaluate("X=R", ValueError("x")) == Actions(fail=True)
