"""A typo in the name of one of Encore's own classes or modules gets a did-you-mean."""
from __future__ import annotations

import pytest

from engine.config.user_modules import resolve_class
from engine.errors import ConfigurationError


@pytest.mark.parametrize(("path", "says"), [
    # a class name one letter short
    ("operations.soap:SoapOperaton", "did you mean 'operations.soap:SoapOperation'?"),
    # the module misspelt: the class is looked for in the closest module
    ("operations.sop:SoapOperation", "did you mean 'operations.soap:SoapOperation'?"),
    # a class of the engine's own
    ("engine.router:Ruter", "did you mean 'engine.router:Router'?"),
])
def test_a_typo_in_encores_own_class_gets_a_did_you_mean(path: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        resolve_class(path, item="Backend")
    text = str(refused.value)
    assert text.startswith("item 'Backend', setting 'class': module ")
    assert text.endswith(says)
    assert "rename yours" not in text  # no advice about a package of the user's


def test_a_name_close_to_nothing_of_encores_keeps_the_advice_about_its_packages() -> None:
    with pytest.raises(ConfigurationError) as refused:
        resolve_class("operations.soap:Charges", item="Backend")
    assert "did you mean" not in str(refused.value)
    assert "'operations' is Encore's own package" in str(refused.value)


def test_a_typo_outside_encores_packages_gets_no_guess() -> None:
    with pytest.raises(ConfigurationError) as refused:
        resolve_class("tests.unit.sample_ops:StubOperaton", item="Backend")
    assert str(refused.value).endswith("has no 'StubOperaton'")
