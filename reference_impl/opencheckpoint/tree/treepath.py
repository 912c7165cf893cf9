"""Tree paths as linked ``(parent, key)`` nodes, rendered only when a message or a display needs one.

Every node of a tree document has a path (``$.model['layer 1'][3]``). Built
as a string per node, a path repeats all its ancestors' keys: a document of
deep levels with long keys (125 maps with 1,000-character keys) would cost
depth x key length per node, in time and, for the array nodes a reader keeps,
in memory. A :class:`TreePath` holds only its parent, its own key and the
rendered length, so the paths of a document cost a constant per node; its
string is built on demand and clipped to :data:`PATH_DISPLAY_CHARS` (the start
and the end kept), so rendering one costs at most a few kilobytes whatever
the depth and the key lengths.

>>> path = ROOT.child("model").child("layer 1").child(3)
>>> str(path), path.length
("$.model['layer 1'][3]", 21)
>>> deep = ROOT
>>> for level in range(50):
...     deep = deep.child("k" * 100)
>>> text = str(deep.child(0))
>>> len(text) <= PATH_DISPLAY_CHARS + 40, text[:8], text[-8:]
(True, '$.kkkkkk', 'kkkkk[0]')
"""

from __future__ import annotations

from typing import Final

#: A str key longer than this appears shortened in tree paths (its first characters and the count of
#: the rest): real state-dict keys are far shorter, so the paths users see stay whole.
PATH_KEY_CHARS: Final = 1024
#: A rendered path longer than this keeps its first :data:`PATH_HEAD_CHARS` and last
#: :data:`PATH_TAIL_CHARS` characters, the middle replaced by ``...(+N chars)...``.
PATH_DISPLAY_CHARS: Final = 512
PATH_HEAD_CHARS: Final = 128
PATH_TAIL_CHARS: Final = 352


def segment(key: str | int) -> str:
    """The text a key adds to its parent's path: ``.name``, ``['not an identifier']``, ``[3]``.

    >>> segment("w"), segment(3), segment("a b"), segment("a" * 1030)[-17:]
    ('.w', '[3]', "['a b']", "a'... (+6 chars)]")
    """
    if isinstance(key, int):
        return f"[{key}]"
    if len(key) > PATH_KEY_CHARS:
        return f"[{key[:PATH_KEY_CHARS]!r}... (+{len(key) - PATH_KEY_CHARS} chars)]"
    return f".{key}" if key.isidentifier() else f"[{key!r}]"


class TreePath:
    """One node's path: its parent's path plus one key. ``str()`` renders it, clipped.

    Construction stores the two references only: a reader builds one path per array node of a
    document (20,000 for a model of tiny arrays), and most are never rendered, so the segment text
    and the rendered length are computed when first needed (a message, a hash, a comparison).
    """

    __slots__ = ("key", "parent", "_length")

    def __init__(self, parent: TreePath | None, key: str | int, text: str | None = None) -> None:
        self.parent = parent
        self.key = key
        #: Characters of the whole rendered path; -1 until first asked for (``text`` given: known now).
        self._length = -1 if text is None else (parent.length if parent is not None else 0) + len(text)

    @property
    def length(self) -> int:
        """Characters of the whole rendered path (what ``str`` would give without clipping)."""
        if self._length < 0:
            # Iterative: a deep chain of paths none of which was measured yet must not recurse.
            chain: list[TreePath] = []
            node: TreePath | None = self
            while node is not None and node._length < 0:
                chain.append(node)
                node = node.parent
            total = node._length if node is not None else 0
            for item in reversed(chain):
                total += len(item._segment())
                item._length = total
        return self._length

    def child(self, key: str | int) -> TreePath:
        """The path of entry ``key`` (a map key, or an array or tuple index) below this node."""
        return TreePath(self, key)

    def _segment(self) -> str:
        return "$" if self.parent is None else segment(self.key)

    def __str__(self) -> str:
        if self.length <= PATH_DISPLAY_CHARS:
            parts = []
            node: TreePath | None = self
            while node is not None:
                parts.append(node._segment())
                node = node.parent
            return "".join(reversed(parts))
        # The end first: walk up until the tail is long enough (each segment is at most ~1 KiB).
        tail: list[str] = []
        size = 0
        node = self
        while node is not None and size < PATH_TAIL_CHARS:
            text = node._segment()
            tail.append(text)
            size += len(text)
            node = node.parent
        tail_text = "".join(reversed(tail))[-PATH_TAIL_CHARS:]
        chain: list[TreePath] = []
        node = self
        while node is not None:
            chain.append(node)
            node = node.parent
        head: list[str] = []
        size = 0
        for node in reversed(chain):
            if size >= PATH_HEAD_CHARS:
                break
            text = node._segment()
            head.append(text)
            size += len(text)
        head_text = "".join(head)[:PATH_HEAD_CHARS]
        omitted = self.length - len(head_text) - len(tail_text)
        return f"{head_text}...(+{omitted} chars)...{tail_text}"

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        """Paths are equal when their keys are, level by level (two decoders' nodes compare equal)."""
        if isinstance(other, str):
            return str(self) == other
        if not isinstance(other, TreePath):
            return NotImplemented
        left: TreePath | None = self
        right: TreePath | None = other
        while left is not None and right is not None:
            if left is right:
                return True
            if left.length != right.length or type(left.key) is not type(right.key) or left.key != right.key:
                return False
            left, right = left.parent, right.parent
        return left is right

    def __hash__(self) -> int:
        return hash((self.length, self.key))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class ShardRecordPath(TreePath):
    """The path of a shard record of a sharded array node: ``$.w[3][1]`` is record 1 of the records (element 3
    of the node), not an element of the array; its text says so wherever an error names it.

    >>> str(ShardRecordPath(ROOT.child("w").child(3), 1))
    '$.w[3][1] (shard record 1 of the sharded array $.w)'
    """

    __slots__ = ()

    def __str__(self) -> str:
        array = self.parent.parent if self.parent is not None else None
        return f"{TreePath.__str__(self)} (shard record {self.key} of the sharded array {array})"

    __repr__ = __str__


#: The path of a document's root object.
ROOT: Final = TreePath(None, "$", "$")
