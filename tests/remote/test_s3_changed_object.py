"""An object of an open checkpoint truncated on S3 (moto on loopback) before a lazy read: the read raises
:class:`IntegrityError` (R-CHK-6) naming the object with the size the manifest records and the size it has now,
whether the array's range ends past the new end (a short answer) or starts past it (the store refuses the range
as not satisfiable), never a bare storage failure (issue 22; docs/object-stores.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, IntegrityError, open_checkpoint
from opencheckpoint.remote import FsPath

pytest.importorskip("s3fs")
pytest.importorskip("moto")

#: eight arrays of 4,000 bytes, each padded to 4,032: data.bin is 32,224 bytes; it is cut to 8,000
ARRAYS = {f"a{i}": np.full(1000, i, np.float32) for i in range(8)}


@pytest.mark.parametrize("name", ["a1", "a6"])  # a1: ends past the new end; a6: starts past it
def test_a_lazy_read_of_a_truncated_object_is_an_integrity_error_with_both_sizes(s3: Any, name: str) -> None:
    where = FsPath(s3, f"{s3.test_bucket}/ck")
    Checkpoint(model=ARRAYS).save(where)
    key = where.key("components/model/data.bin")
    listed = s3.info(key)["size"]
    with open_checkpoint(where) as checkpoint:
        tree = checkpoint.tree("model")
        s3.pipe_file(key, s3.cat_file(key)[:8000])
        with pytest.raises(IntegrityError) as caught:
            tree[name].read()
    assert caught.value.file == "components/model/data.bin"
    assert f"file is 8000 bytes, the manifest says {listed} (truncated)" in str(caught.value)
