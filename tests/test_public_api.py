"""Tests use ``Knowledge`` as the interfaces do: its public methods, never the parts behind it.

A test that needs a part (the index keeper, the repository, the claims store) builds it by its
own name (``partskit``, ``Git(root)``, ``ClaimStore(root)``) and hands it to ``Knowledge.open``,
or tests it directly; reaching into the facade for it (``kb.indexing``) would tie the tests to
how the facade is wired rather than to what it does.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent

# the parts Wiring builds (kiwifs/services/wiring.py), as attributes of a library
PARTS = (
    "briefing",
    "claims",
    "consolidation",
    "events",
    "files",
    "git",
    "history",
    "indexing",
    "integrity",
    "memory_writes",
    "pipeline",
    "reading",
    "storage",
)
REACHING_IN = re.compile(r"\b\w*kb\.(" + "|".join(PARTS) + r")\b")


def test_no_test_reaches_into_a_library_for_its_parts() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{number}: {line.strip()}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if REACHING_IN.search(line)
    ]
    assert found == [], "use a public Knowledge method or build the part:\n" + "\n".join(found)


def test_the_pattern_finds_what_it_forbids() -> None:
    assert REACHING_IN.search("kb.indexing._open()")
    assert REACHING_IN.search("with queue_kb.claims.store:")
    assert not REACHING_IN.search("kb.search('fox')") and not REACHING_IN.search("kb.gitignore")
