"""save_async started while the interpreter exits: written before it returns, or refused in words (never lost).

``atexit`` handlers run last-registered-first, so a handler registered before ``opencheckpoint`` was imported
runs after the library's own exit hooks have waited for the writer threads: a save started there must not be
handed to a thread nobody waits for (docs/async-save.md, "When the process exits").
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from opencheckpoint import read_component, validate


def _exit_with(script: str, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), str(target)],
                          capture_output=True, text=True, timeout=60)


def _published_ones(target: Path) -> bool:
    return validate(target).ok and read_component(target, "w").tolist() == [1.0] * 4


def test_a_save_async_in_an_atexit_handler_registered_before_the_import_is_published(tmp_path: Path) -> None:
    target = tmp_path / "c"
    done = _exit_with("""
        import atexit, sys, time
        import numpy as np
        def final_save():
            # a slow write: a writer thread would still be running when the interpreter tears down
            handle = Checkpoint(w=np.ones(4)).save_async(sys.argv[1], progress=lambda *_: time.sleep(0.2))
            print(handle, flush=True)
        atexit.register(final_save)
        from opencheckpoint import Checkpoint
    """, target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("published>"), done.stdout
    assert _published_ones(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no staging debris either


def test_a_save_async_in_an_atexit_handler_that_imports_the_library_is_published(tmp_path: Path) -> None:
    # Neither threading nor opencheckpoint is imported before exit: no threading exit hook runs at all.
    target = tmp_path / "c"
    done = _exit_with("""
        import atexit, sys
        def final_save():
            import numpy as np
            from opencheckpoint import Checkpoint
            Checkpoint(w=np.ones(4)).save_async(sys.argv[1])
        atexit.register(final_save)
    """, target)
    assert done.returncode == 0, done.stderr
    assert _published_ones(target)


def test_a_save_async_that_fails_in_a_late_atexit_handler_is_logged(tmp_path: Path) -> None:
    target = tmp_path / "occupied"
    target.write_text("user data")
    done = _exit_with("""
        import atexit, sys
        import numpy as np
        atexit.register(lambda: Checkpoint(w=np.ones(4)).save_async(sys.argv[1]))
        from opencheckpoint import Checkpoint
    """, target)
    assert done.returncode == 0
    assert "started at interpreter exit, failed" in done.stderr and "TargetExists" in done.stderr, done.stderr
    assert target.read_text() == "user data"


def test_a_save_from_del_during_finalization_is_refused_with_a_checkpoint_error(tmp_path: Path) -> None:
    target = tmp_path / "c"
    done = _exit_with("""
        import sys
        import numpy as np
        from opencheckpoint import Checkpoint
        class SavesOnCollection:
            def __init__(self):
                self.save = Checkpoint(w=np.ones(4)).save_async  # module globals are gone by teardown
                self.target = sys.argv[1]
            def __del__(self):
                self.save(self.target)
        keep = SavesOnCollection()  # collected at module teardown, after every exit hook
    """, target)
    assert "CheckpointError" in done.stderr and "interpreter is finalizing" in done.stderr, done.stderr
    assert "ImportError" not in done.stderr
    assert not target.exists()
