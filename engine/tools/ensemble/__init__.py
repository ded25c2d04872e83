"""``encore import ensemble``: an Ensemble production class read into a production file,
skeleton modules for the classes Encore has no equivalent of, and a mapping report
(docs/migrating.md).

:mod:`.source` reads the three forms a production is kept in (a UDL class, an XML export,
a bare ``<Production>``) into :mod:`.model`; :mod:`.mapping` turns each item into an Encore
item by the tables of :mod:`.classes` and :mod:`.settings_map`; :mod:`.skeleton` and
:mod:`.toml_out` write what it gives; :mod:`.report` says what became of every setting.
"""
from __future__ import annotations

from engine.tools.ensemble.importer import ImportResult, import_production
from engine.tools.ensemble.source import read_source

__all__ = ["ImportResult", "import_production", "read_source"]
