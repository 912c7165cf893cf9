"""The rule table of strict I-JSON (spec §5.1, step 4 of §15): the rules of every JSON document of the format.

:mod:`opencheckpoint.format.strict_json` parses ``manifest.json`` and every
``value.json`` with the standard library's parser and its hooks; each hook
sees one token and reports the rule it breaks through this table
(:meth:`RuleTable.error <opencheckpoint.rules.RuleTable.error>`), so the class
of each ID is written here once. The table names no file: the parser adds the
document it was given. A ``value.json`` breaking a manifest rule is reported
under R-CMP-18, which names the rule it applies.

>>> str(IJSON.error("R-MAN-2", "starts with a byte order mark", file="manifest.json", field="$"))
'ManifestError: manifest.json: $: starts with a byte order mark [R-MAN-2]'
"""

from __future__ import annotations

from ..format.errors import LimitExceeded, ManifestError
from . import RuleTable

IJSON = RuleTable(version=1, file=None)

IJSON.declare("R-MAN-1", ManifestError)
IJSON.declare("R-MAN-2", ManifestError)
IJSON.declare("R-MAN-3", ManifestError)
IJSON.declare("R-MAN-4", ManifestError)
IJSON.declare("R-MAN-5", ManifestError)
IJSON.declare("R-MAN-6", ManifestError)
IJSON.declare("R-CMP-18", ManifestError)
IJSON.declare("R-LIM-3", LimitExceeded)
IJSON.declare("R-LIM-4", LimitExceeded)
