"""The generated corpus's ground truth, amended for kiwifs's one deliberate difference from it.

The generator (``shared/bench/gen_corpus.py``) reads a ``merged-from`` that is a single mapping as
KiwiFS 0.4 did: a shape warning that covers nothing. kiwifs, like newer KiwiFS scans, counts it as
one entry (docs/compatibility.md): its target is merged, it adds one reference and no warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SINGLE_MAPPING_PAGE = "concepts/_single-mapping.md"


def single_mapping_targets(root: Path) -> set[str]:
    """The episode paths the generator's single-mapping page cites (empty on a tiny corpus)."""
    page = root / SINGLE_MAPPING_PAGE
    if not page.is_file():
        return set()
    front = page.read_text(encoding="utf-8").split("\n---\n", 1)[0].removeprefix("---\n")
    entry = yaml.safe_load(front)["merged-from"]
    assert isinstance(entry, dict), entry
    return {entry["path"]}


def amend(truth: dict[str, Any], root: Path) -> dict[str, Any]:
    """``truth`` (the generator's summary) as kiwifs's rules count the single-mapping page."""
    targets = single_mapping_targets(root)
    amended = dict(truth)
    amended["unmerged"] = [p for p in truth["unmerged"] if p not in targets]
    amended["unmerged_count"] = truth["unmerged_count"] - len(targets)
    amended["merged_from_refs"] = truth["merged_from_refs"] + len(targets)
    amended["warnings_shape"] = truth["warnings_shape"] - len(targets)
    amended["single_mapping_targets"] = targets
    return amended
