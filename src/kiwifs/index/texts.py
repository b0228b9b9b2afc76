"""The text of each indexed file, stored once: compressed, beside a contentless FTS5 table.

A normal FTS5 table keeps its own copy of every text, which made the index twice the size of
the markdown. The full-text table is contentless instead (it holds only the inverted index),
and the text lives in ``bodies`` (row id = the file's id). The text is still needed: FTS5
deletes a contentless row only when given the exact text it indexed (so a rewritten or deleted
file loses its old words), snippets are cut from it, and the embedder chunks it.

Texts are compressed with zstd and a dictionary trained on the root itself when the index is
built in bulk (:func:`train`, stored in ``body_dicts``): knowledge files repeat the same
frontmatter keys, headings and phrases, which a dictionary holds once for all of them. On the
100k-episode benchmark corpus the texts take 27 % of their size this way, against 45 % with
zlib per text, and compress four times faster. Each compressed text names its dictionary in its
zstd frame (``0``: none, as for an index filled row by row), so texts written later with
another dictionary, or none, read back the same.

Each file row's frontmatter JSON (``files.frontmatter``) is compressed the same way, with a
dictionary of its own (:func:`train_both`; a root too small to train two shares one): kept as
plain JSON beside the text that holds the same frontmatter as YAML, it made the index larger than
the markdown (40 of 258 MB on the 100k-page corpus; compressed it takes 11). SQL reads it
through :data:`FRONTMATTER_SQL`, a function every index connection has (:func:`register`); a JSON
shorter than :data:`PACK_FROM` bytes (``{}``, a title) stays text, which the function returns as
it is.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiwifs.index import changelog

# zstandard (with the platform module it imports, ~2 ms) loads with the first text compressed or
# read back: opening an index and answering the memory report need neither.
if TYPE_CHECKING:
    import zstandard

LEVEL = 3  # zstd's default; level 19 saves ~14 % more for fifty times the time
# The texts' dictionary. At a million files one of 256 KiB stored them 3 % smaller, but each
# text took 1.3 µs more to read back (6.1 against 4.8), and a server's first searches read
# hundreds: ~0.2 ms more a search, which the first searches' budget did not have.
DICT_BYTES = 64 * 1024
FRONTMATTER_DICT_BYTES = 16 * 1024  # JSON of a few keys: a larger one gained nothing
DICT_SAMPLES = 1000  # texts sampled to train it (~0.15 s); more samples gain under 1 %
MIN_SAMPLES = 100  # below this, a dictionary learns too little to pay for itself
PACK_FROM = 64  # frontmatter JSON shorter than this is stored as text: zstd would not shrink it
FRONTMATTER_SQL = "kiwi_frontmatter"  # the SQL function: a stored frontmatter as JSON text
LOG_SCHEMA = "CREATE TABLE fts_log (seq INTEGER PRIMARY KEY, doc INTEGER NOT NULL);\n"
TEXTS, FRONTMATTER = 1, 2  # what a dictionary compresses (bits of ``body_dicts.kind``)


class Codec:
    """Compresses texts with one dictionary (or none). Not thread-safe: one per thread."""

    def __init__(self, dictionary: bytes | None = None) -> None:
        self.dictionary = dictionary
        import zstandard

        self.dict_id = 0
        if dictionary is None:
            self._compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=False)
        else:
            data = zstandard.ZstdCompressionDict(dictionary)
            data.precompute_compress(level=LEVEL)  # else every text digests it again (~90 µs)
            self.dict_id = data.dict_id()
            self._compressor = zstandard.ZstdCompressor(
                level=LEVEL, dict_data=data, write_checksum=False, write_dict_id=True
            )

    def pack(self, text: str) -> bytes:
        return self._compressor.compress(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class Dictionaries:
    """The dictionaries a bulk build compresses with: one for the texts, one for the
    frontmatter JSON (``None``: the texts' is used for it too)."""

    text: bytes | None = None
    frontmatter: bytes | None = None


NO_DICTIONARIES = Dictionaries()


@dataclass(frozen=True)
class Codecs:
    """A codec for the texts and one for the frontmatter JSON (possibly the same)."""

    text: Codec
    frontmatter: Codec

    @classmethod
    def of(cls, dictionaries: Dictionaries) -> Codecs:
        text = Codec(dictionaries.text)
        if dictionaries.frontmatter is None:
            return cls(text, text)
        return cls(text, Codec(dictionaries.frontmatter))


def train_both(texts: Sequence[bytes], frontmatter: Sequence[bytes]) -> Dictionaries:
    """The dictionaries learnt from sample texts and their frontmatter JSON (the ones of
    :data:`PACK_FROM` bytes or more, which are compressed).

    Two, when there are enough of each: the frontmatter of a root repeats a few keys, its
    texts their headings and prose, and a dictionary of each compresses better than one of
    both (at a million files the texts 1 % and the JSON 13 % smaller). Else one of both."""
    packed = [f for f in frontmatter if len(f) >= PACK_FROM]
    json_dict = train(packed, FRONTMATTER_DICT_BYTES)
    if json_dict is None:
        return Dictionaries(train([*texts, *packed]))
    return Dictionaries(train(texts), json_dict)


def train(samples: Sequence[bytes], size: int = DICT_BYTES) -> bytes | None:
    """A dictionary of ``size`` bytes learnt from ``samples``, or ``None`` when they are too few
    or too alike."""
    import zstandard

    usable: list[bytes | bytearray | memoryview] = [s for s in samples if s]
    if len(usable) < MIN_SAMPLES:
        return None
    try:
        trained = zstandard.train_dictionary(size, usable, level=LEVEL)
    except zstandard.ZstdError:
        return None
    return trained.as_bytes()


_local = threading.local()
_dictionaries: dict[int, bytes] = {}  # dictionary id -> dictionary, for every index read here
_dict_lock = threading.Lock()


def _decompressor(conn: sqlite3.Connection, dict_id: int) -> zstandard.ZstdDecompressor:
    """The decompressor for frames made with dictionary ``dict_id`` (per thread, cached).

    zstd picks dictionary ids at random (32 bits), so two indexes read by one process share a
    cache entry only by a one-in-four-billion chance; the ids are kept as zstd made them.
    """
    cache: dict[int, zstandard.ZstdDecompressor] = _local.__dict__.setdefault("cache", {})
    found = cache.get(dict_id)
    if found is None:
        found = cache[dict_id] = _new_decompressor(conn, dict_id)
    return found


def _new_decompressor(conn: sqlite3.Connection, dict_id: int) -> zstandard.ZstdDecompressor:
    import zstandard

    if dict_id == 0:
        return zstandard.ZstdDecompressor()
    with _dict_lock:
        data = _dictionaries.get(dict_id)
    if data is None:
        row = conn.execute("SELECT data FROM body_dicts WHERE id = ?", (dict_id,)).fetchone()
        if row is None:
            raise sqlite3.DatabaseError(f"no stored dictionary {dict_id} for a text")
        data = bytes(row[0])
        with _dict_lock:
            _dictionaries[dict_id] = data
    return zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(data))


_frame_reader: Callable[[bytes], Any] | None = None


def _frame_parameters() -> Callable[[bytes], Any]:
    """zstd's frame header reader, imported once (an import statement costs per call)."""
    global _frame_reader
    if _frame_reader is None:
        import zstandard

        _frame_reader = zstandard.get_frame_parameters
    return _frame_reader


def unpack(conn: sqlite3.Connection, blob: bytes | None) -> str | None:
    if blob is None:
        return None
    dict_id = _frame_parameters()(blob).dict_id
    return _decompressor(conn, dict_id).decompress(blob).decode("utf-8", "surrogatepass")


def pack_frontmatter(codec: Codec, json_text: str) -> str | bytes:
    """What ``files.frontmatter`` stores for the frontmatter ``json_text``."""
    return json_text if len(json_text) < PACK_FROM else codec.pack(json_text)


def frontmatter_text(conn: sqlite3.Connection, stored: str | bytes | None) -> str:
    """The frontmatter JSON a ``files.frontmatter`` value holds (``{}`` for none)."""
    if stored is None:
        return "{}"
    if isinstance(stored, str):
        return stored
    return unpack(conn, stored) or "{}"


def frontmatter_sql(column: str = "frontmatter") -> str:
    """SQL for the frontmatter JSON text of the ``files.frontmatter`` value ``column``."""
    return f"{FRONTMATTER_SQL}({column})"


def register(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL function :data:`FRONTMATTER_SQL`.

    A ``/meta`` query calls it for every row it scans, so it keeps what it can: a decompressor
    per dictionary, its own (SQLite runs one statement of a connection at a time, so the
    function never runs twice at once, which a decompressor could not), and its last answer (a
    query naming a row's frontmatter twice, a filter's type then its value, decompresses it
    once). It holds ``conn`` (to read a dictionary it has not seen yet), a cycle the garbage
    collector breaks; connections are closed explicitly anyway."""
    decoders: dict[int, Callable[[bytes], bytes]] = {}
    last_stored, last_text = b"", "{}"

    def frontmatter(stored: str | bytes | None) -> str:
        nonlocal last_stored, last_text
        if type(stored) is not bytes:
            return frontmatter_text(conn, stored)  # text or none: nothing to decompress
        if stored != last_stored:
            dict_id = _frame_parameters()(stored).dict_id
            decode = decoders.get(dict_id)
            if decode is None:
                decode = decoders[dict_id] = _new_decompressor(conn, dict_id).decompress
            last_stored, last_text = stored, decode(stored).decode("utf-8", "surrogatepass")
        return last_text

    conn.create_function(FRONTMATTER_SQL, 1, frontmatter, deterministic=True)


def save_dictionaries(conn: sqlite3.Connection, dictionaries: Dictionaries) -> None:
    """Make ``dictionaries`` the ones the texts and the frontmatter of this index are
    compressed with from now on (a rebuild's fresh tables hold no other)."""
    text, json_dict = dictionaries.text, dictionaries.frontmatter
    if json_dict is None:
        uses = [(text, TEXTS | FRONTMATTER)]
    else:
        uses = [(text, TEXTS), (json_dict, FRONTMATTER)]
    for dictionary, kind in uses:
        if dictionary is not None:
            conn.execute(
                "INSERT OR REPLACE INTO body_dicts (id, data, kind) VALUES (?, ?, ?)",
                (Codec(dictionary).dict_id, dictionary, kind),
            )


def text_codec(conn: sqlite3.Connection) -> Codec:
    """The codec of the index's texts (no dictionary if it has none)."""
    return _codec(conn, TEXTS)


def frontmatter_codec(conn: sqlite3.Connection) -> Codec:
    """The codec of the index's frontmatter JSON (no dictionary if it has none)."""
    return _codec(conn, FRONTMATTER)


def _codec(conn: sqlite3.Connection, kind: int) -> Codec:
    sql = "SELECT id FROM body_dicts WHERE kind & ? ORDER BY rowid DESC LIMIT 1"
    row = conn.execute(sql, (kind,)).fetchone()
    dict_id = 0 if row is None else int(row[0])
    codecs: dict[int, Codec] = _local.__dict__.setdefault("codecs", {})
    codec = codecs.get(dict_id)
    if codec is None:
        if dict_id == 0:
            codec = Codec()
        else:
            blob = conn.execute("SELECT data FROM body_dicts WHERE id = ?", (dict_id,))
            codec = Codec(bytes(blob.fetchone()[0]))
        codecs[dict_id] = codec
    return codec


class TextChanges:
    """One transaction's changes to the words and stored texts, written as its last statements.

    SQLite 3.40's FTS5 writes the words it holds in memory out as a new segment whenever a
    statement that may need undoing (an upsert, a multi-row update) starts in the same
    transaction: storing a file's words before its row's upsert cost a segment per file, and
    on the 100k root that flush and the merges it brought took more than half of a round's
    time. Held here and written after every other statement of the transaction, the words of
    a whole round go down as one segment, at commit.

    A text stored and forgotten again within the transaction never reaches the tables; a row
    id forgotten and stored again (a file rewritten, or an id reused after a delete) has its
    old words removed before the new ones go in.
    """

    def __init__(self) -> None:
        self._gone: dict[int, None] = {}  # row ids whose stored text and words go
        self._new: dict[int, str] = {}  # row id: the text to store and index

    def store(self, file_id: int, text: str) -> None:
        """Index ``text`` as the file's words and keep it for the next delete."""
        self._new[file_id] = text

    def forget(self, file_id: int) -> None:
        """Remove the file's words and its stored text (a row without one has none to lose)."""
        if self._new.pop(file_id, None) is None:
            self._gone[file_id] = None

    def write(self, conn: sqlite3.Connection) -> None:
        """Apply the changes: the stored texts and the change log first, the words last."""
        gone, new = list(self._gone), self._new
        self._gone, self._new = {}, {}
        if not gone and not new:
            return
        old = _stored(conn, gone)
        conn.executemany("DELETE FROM bodies WHERE id = ?", ((i,) for i in old))
        codec = text_codec(conn)
        conn.executemany(
            "INSERT INTO bodies (id, text) VALUES (?, ?)",
            ((i, codec.pack(text)) for i, text in new.items()),
        )
        changelog.append(conn, "fts_log", "doc", [*old, *(i for i in new if i not in old)])
        conn.executemany(
            "INSERT INTO fts (fts, rowid, body) VALUES ('delete', ?, ?)",
            ((i, unpack(conn, blob)) for i, blob in old.items()),
        )
        conn.executemany("INSERT INTO fts (rowid, body) VALUES (?, ?)", new.items())


def _stored(conn: sqlite3.Connection, ids: list[int]) -> dict[int, bytes]:
    """The compressed stored texts of ``ids`` that have one, in the order of ``ids``."""
    found: dict[int, bytes] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(f"SELECT id, text FROM bodies WHERE id IN ({marks})", chunk)
        found.update((int(i), bytes(blob)) for i, blob in rows)
    return {i: found[i] for i in ids if i in found}


def texts(conn: sqlite3.Connection, ids: list[int]) -> dict[int, str]:
    """The stored texts of ``ids`` (an id without one maps to ``""``)."""
    stored = _stored(conn, ids)
    return {i: (unpack(conn, stored[i]) or "") if i in stored else "" for i in ids}
