"""`import opencheckpoint` must not import torch or JAX: framework adapters load lazily."""

from __future__ import annotations

import subprocess
import sys


def test_import_opencheckpoint_imports_no_framework() -> None:
    code = (
        "import sys, opencheckpoint, opencheckpoint.cli.main, opencheckpoint.read.validate\n"
        "import numpy as np\n"
        "from opencheckpoint import Checkpoint, read_component\n"
        "import tempfile, os\n"
        "p = os.path.join(tempfile.mkdtemp(), 'c')\n"
        "Checkpoint(w=np.zeros(3)).save(p); read_component(p, 'w')\n"
        "print(' '.join(m for m in ('torch', 'jax', 'flax', 'optax') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
