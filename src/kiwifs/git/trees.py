"""Git tree objects written from their entries, kept in memory between commits.

A commit rewrites the tree object of every folder on the paths it changes. libgit2's tree
builder reads the whole tree, puts every entry in a hash map, sorts them all again and
serialises them: for the folder a writer fills, ~0.35 ms at 250 files, ~1 ms at 1,500 and
~2.5 ms at 4,300 (a month of episodes), most of a commit. Here a tree is the list of its
entries as git stores them (``<mode> <name>\\0<20-byte id>``), in git's order, beside their sort
keys: a change is a binary search and a list insert, and the object is the entries joined and
written by the object database. A commit into those three folders is 1.2, 1.45 and 1.7
times as fast (``bench/git_trees.py``, figures in docs/dev/benchmarks-log.md).
:class:`TreeCache` keeps the entries of the trees written last under their ids, so the next
commit on the same folder starts from them instead of parsing the tree again.

Git's order: entries sorted by name as bytes, a folder's name compared as if it ended in
``/``. A name appears once in a tree, whatever its type: putting a file where a folder of the
same name was replaces that entry. Entries not changed keep their bytes as they were.

A :class:`~kiwifs.git.repo.Git` made with ``kept_trees=False`` (``Tuning.kept_trees``) builds
trees with libgit2's tree builder instead: the plain path, which ``tests/git/test_gittrees.py``
holds equal to this one.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import OrderedDict
from typing import TYPE_CHECKING

from kiwifs.errors import StorageError

if TYPE_CHECKING:
    import pygit2

MODE_TREE = 0o040000  # a folder's tree entry mode, as git and libgit2 define it
_TREE_MODES = (b"40000", b"040000")  # git writes the first; the second is read as well
# one entry of a tree object: mode, name (anything but NUL), the raw 20-byte id
_ENTRY = re.compile(rb"([0-7]+) ([^\0]+)\0(.{20})", re.DOTALL)
OBJECT_TREE = 2  # git's object type number of a tree (GIT_OBJECT_TREE)
# entries kept over all cached trees: ~100 bytes each, so ~20 MB at most
CACHE_ENTRIES = 200_000

Entry = tuple[bytes, int]  # an entry's raw 20-byte object id and its file mode


class Entries:
    """One tree's entries in git's order: ``items`` as stored, ``keys`` to search them."""

    __slots__ = ("items", "keys")

    def __init__(self, keys: list[bytes] | None = None, items: list[bytes] | None = None) -> None:
        self.keys: list[bytes] = keys if keys is not None else []
        self.items: list[bytes] = items if items is not None else []

    @classmethod
    def parse(cls, raw: bytes) -> Entries:
        """The entries of a tree object's content; StorageError when it is not one."""
        found = _ENTRY.findall(raw)
        items = [b"%s %s\0%s" % entry for entry in found]
        if sum(map(len, items)) != len(raw):  # the matches, which never overlap, are not all
            raise StorageError("git tree object is damaged")
        keys = [name + b"/" if mode in _TREE_MODES else name for mode, name, _ in found]
        if any(a >= b for a, b in zip(keys, keys[1:], strict=False)):
            # not in git's order (written by some other tool): put in order, as libgit2's
            # tree builder would, for the binary searches to hold
            pairs = sorted(zip(keys, items, strict=True))
            keys, items = [k for k, _ in pairs], [i for _, i in pairs]
        return cls(keys, items)

    def __len__(self) -> int:
        return len(self.keys)

    def _index(self, name: bytes) -> int:
        """Where the entry named ``name`` is (a file's key or a folder's), or -1."""
        keys = self.keys
        for key in (name, name + b"/"):
            i = bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                return i
        return -1

    def get(self, name: bytes) -> Entry | None:
        """The id and mode of the entry named ``name``; ``None`` when there is none."""
        i = self._index(name)
        if i < 0:
            return None
        item = self.items[i]
        return item[-20:], int(item[: item.index(b" ")], 8)

    def put(self, name: bytes, oid: bytes, mode: int) -> None:
        """Add the entry, or replace the one of that name (of any type)."""
        self.remove(name)
        key = name + b"/" if mode == MODE_TREE else name
        i = bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.items.insert(i, b"%o %s\0%s" % (mode, name, oid))

    def remove(self, name: bytes) -> None:
        i = self._index(name)
        if i >= 0:
            del self.keys[i]
            del self.items[i]

    def data(self) -> bytes:
        """The tree object's content."""
        return b"".join(self.items)


class TreeCache:
    """The entries of recently written trees, by id (least recently written go first).

    :meth:`take` hands a tree's entries over to be changed: they leave the cache, so entries
    kept under an id always are that tree's. :meth:`write` writes changed entries and keeps
    them under their new id.
    """

    def __init__(self, limit: int = CACHE_ENTRIES) -> None:
        self.limit = limit
        self._trees: OrderedDict[bytes, Entries] = OrderedDict()
        self._size = 0

    def take(self, repo: pygit2.Repository, oid: pygit2.Oid | None) -> Entries:
        """The entries of tree ``oid`` (empty for ``None``), the caller's to change."""
        if oid is None:
            return Entries()
        entries = self._trees.pop(oid.raw, None)
        if entries is not None:
            self._size -= len(entries)
            return entries
        try:
            kind, raw = repo.odb.read(oid)
        except KeyError as exc:
            raise StorageError(f"git tree {oid} is missing from the repository") from exc
        if kind != OBJECT_TREE:
            raise StorageError(f"git object {oid} is not a tree")
        return Entries.parse(raw)

    def write(self, repo: pygit2.Repository, entries: Entries) -> pygit2.Oid:
        """Write the tree object of ``entries`` and keep them under its id."""
        oid: pygit2.Oid = repo.odb.write(OBJECT_TREE, entries.data())
        previous = self._trees.pop(oid.raw, None)
        if previous is not None:
            self._size -= len(previous)
        if len(entries) <= self.limit:
            self._trees[oid.raw] = entries
            self._size += len(entries)
            while self._size > self.limit:
                _, old = self._trees.popitem(last=False)
                self._size -= len(old)
        return oid
