"""What every REST answer is made of, without FastAPI: the error-code → status table and the
JSON encoding.

Kept apart from :mod:`kiwifs.rest.http` so that the start-up app (:mod:`kiwifs.rest.starting`),
which answers the health probes before FastAPI is even imported, answers them by the same rules.
"""

from __future__ import annotations

import json
from typing import Any

from kiwifs.base.text import SHOWN_JSON

STATUS: dict[str, int] = {
    "usage": 400,
    "invalid_path": 400,
    "invalid_provenance": 400,
    "invalid_query": 400,
    "invalid_frontmatter": 400,
    "root_not_found": 404,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    "unauthorized": 401,
    "forbidden": 403,
    "rate_limited": 429,
    "locked": 423,
    "busy": 503,
    "storage": 503,
    "unavailable": 503,
}


def json_bytes(content: Any) -> bytes:
    """``content`` as compact JSON whose text is always valid UTF-8.

    A name on disk that is not UTF-8 reaches Python as lone surrogates, which the UTF-8 encoder
    refuses: listing such a file would fail the whole answer. They are sent by the name rule
    (:mod:`kiwifs.base.text`): each undecodable byte as ``\\xNN``, the name a request reads it by.
    """
    text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8", SHOWN_JSON)
