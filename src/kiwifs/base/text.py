"""Caller text: every string the core stores or hands to git, SQLite or the OS is valid Unicode.

Python strings can hold lone surrogates (``"\\ud800"``), which JSON escapes and MCP arguments
carry and which no UTF-8 encoder accepts: left alone, one turns a write into a crash deep inside
the filesystem, git or SQLite. The core refuses them where the text comes in, with a message
naming the field, so every interface answers a usage error instead.

The other way, names on disk that are not UTF-8 (Python keeps each undecodable byte as a lone
surrogate, U+DC80 to U+DCFF) follow one rule on every interface, **the name rule**: such a byte
is shown as ``\\xNN`` (two lowercase hex digits: ``caf\\xe9.md`` for the Latin-1 name
``caf<E9>.md``), and a path a caller gives reads ``\\xNN`` (``80`` to ``ff``, either case) as
that byte again, so the name shown is the name to read it by. ``\\x5c`` is a backslash, for the
rare name that really holds ``\\x`` and two such digits. :func:`shown` (text),
:data:`SHOWN` and :data:`SHOWN_JSON` (codec error handlers, for whole answers encoded at once)
apply the rule on the way out, :func:`name_from_shown` on the way in.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable

from kiwifs.errors import UsageError


def check_text(value: str, what: str, error: type[UsageError] = UsageError) -> str:
    """``value`` unchanged, or ``error`` when it cannot be encoded as UTF-8 (a lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise error(
            f"{what} is not valid Unicode text: lone surrogate U+{ord(bad):04X} "
            f"at character {exc.start}"
        ) from None
    return value


def content_bytes(content: bytes | str) -> bytes:
    """A file's content as given: bytes as they are, text as UTF-8 (refused if it cannot be)."""
    if isinstance(content, bytes):
        return content
    return check_text(content, "content").encode("utf-8")


def without_surrogates(value: str) -> str:
    """``value`` with lone surrogates removed (for text kiwifs cleans rather than refuses)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(c for c in value if not _is_surrogate(c))
    return value


def valid_unicode(value: str) -> str:
    """``value`` with lone surrogates replaced by U+FFFD, for text shown to a client or stored.

    Names read from the disk may hold bytes that are not UTF-8 (Python keeps them as surrogates);
    a response must still be valid UTF-8.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return value


def _is_surrogate(char: str) -> bool:
    return 0xD800 <= ord(char) <= 0xDFFF


# ---------------------------------------------------------------------------------------------
# the name rule: bytes that are not UTF-8 shown as \xNN, and read back

SHOWN = "kiwifs-shown"  # encode errors: an undecodable byte as \xNN
SHOWN_JSON = "kiwifs-shown-json"  # the same inside JSON text, where the backslash is escaped
_ESCAPE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F]|5[cC])")


def _showing(backslash: str) -> Callable[[UnicodeError], tuple[str | bytes, int]]:
    """An encode error handler writing each undecodable byte as ``backslash`` + ``xNN``.

    Any other character the codec refuses (a lone surrogate a caller sent, or text a narrow
    codec cannot hold) becomes U+FFFD, or ``?`` where even that cannot be encoded.
    """

    def handler(exc: UnicodeError) -> tuple[str | bytes, int]:
        if not isinstance(exc, UnicodeEncodeError):
            raise exc
        try:  # as bytes: an encoder takes only ASCII text back from a handler
            replacement = "\ufffd".encode(exc.encoding)
        except UnicodeError:
            replacement = b"?"
        out = []
        for char in exc.object[exc.start : exc.end]:
            code = ord(char)
            if 0xDC80 <= code <= 0xDCFF:
                out.append(f"{backslash}x{code - 0xDC00:02x}".encode(exc.encoding))
            else:
                out.append(replacement)
        return b"".join(out), exc.end

    return handler


codecs.register_error(SHOWN, _showing("\\"))
codecs.register_error(SHOWN_JSON, _showing("\\\\"))


def shown(value: str) -> str:
    """``value`` as every interface shows it: valid Unicode, each byte of a name that is not
    UTF-8 written as ``\\xNN`` (the name rule), any other lone surrogate as U+FFFD."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", SHOWN).decode("utf-8")
    return value


def undecodable(name: str) -> bool:
    """Whether ``name``, as read from the disk, holds a byte that is not UTF-8 (kept by Python
    as a lone surrogate): such a name is shown by the name rule and cannot be handed to
    libraries that take only valid Unicode (the file watcher)."""
    if name.isascii():
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def name_from_shown(path: str) -> str:
    """The name a caller's ``path`` means under the name rule: each ``\\xNN`` escape (``80`` to
    ``ff``, or ``5c``) read as its byte, the bytes then read as the disk's names are (UTF-8, an
    undecodable byte kept as a lone surrogate). A path without escapes is returned as given."""
    if "\\x" not in path or not _ESCAPE.search(path):
        return path
    raw = _ESCAPE.sub(_unescaped, path)
    return raw.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")


def _unescaped(match: re.Match[str]) -> str:
    """One ``\\xNN`` escape as the character the disk's name holds: a backslash for ``5c``,
    else the lone surrogate Python keeps for the byte."""
    byte = int(match.group(1), 16)
    return "\\" if byte == 0x5C else chr(0xDC00 + byte)
