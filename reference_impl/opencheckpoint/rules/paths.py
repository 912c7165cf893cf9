"""The rule table of paths (spec §4, step 8 of §15): lengths, the segment grammar and conflicts.

:mod:`opencheckpoint.format.paths` tests a path's lengths (R-LIM-7, R-LIM-8),
its segments' grammar (reported under the rule of where the path stands: a
component ``path`` R-PATH-1, an inventory key R-PATH-2, a ZIP member name
R-PATH-5) and conflicts between paths (R-PATH-3, R-PATH-4), and reports each
through this table. The table names no file: the caller adds the manifest or
the archive.

>>> str(PATHS.error("R-PATH-2", "path segment '..' does not match the grammar", field="$.files"))
"UnsafePath: $.files: path segment '..' does not match the grammar [R-PATH-2]"
"""

from __future__ import annotations

from ..format.errors import LimitExceeded, UnsafePath
from . import RuleTable

PATHS = RuleTable(version=1, file=None)

PATHS.declare("R-PATH-1", UnsafePath)
PATHS.declare("R-PATH-2", UnsafePath)
PATHS.declare("R-PATH-3", UnsafePath)
PATHS.declare("R-PATH-4", UnsafePath)
PATHS.declare("R-PATH-5", UnsafePath)
PATHS.declare("R-LIM-7", LimitExceeded)
PATHS.declare("R-LIM-8", LimitExceeded)
