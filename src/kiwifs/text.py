"""Caller text: every string the core stores or hands to git, SQLite or the OS is valid Unicode.

Python strings can hold lone surrogates (``"\\ud800"``), which JSON escapes and MCP arguments
carry and which no UTF-8 encoder accepts: left alone, one turns a write into a crash deep inside
the filesystem, git or SQLite. The core refuses them where the text comes in, with a message
naming the field, so every interface answers a usage error instead.
"""

from __future__ import annotations

from .errors import UsageError


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
