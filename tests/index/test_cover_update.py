"""``covered`` after a change touching many episodes: recomputed for those alone while they are
few against the rows (a page citing thousands, written to a root of a million), for every row
once they are many; the report is the scan's either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiwifs.base.printed_json import dumps
from kiwifs.index import rows
from kiwifs.knowledge import Knowledge
from kiwifs.tuning import Tuning

EPISODES = 200


def page(cited: range) -> str:
    lines = "".join(f"  - type: episode\n    id: e-{n}\n" for n in cited)
    return f"---\ntitle: digest\nmerged-from:\n{lines}---\nwhat was learned\n"


@pytest.mark.parametrize("share", [1, 1000], ids=["targeted", "full"])
def test_a_page_citing_many_episodes_covers_exactly_those(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share: int
) -> None:
    # 30 touched ids are "many" (over 10); against ~200 rows they are few (share 1: targeted)
    # or a big share (share 1000: every row recomputed)
    monkeypatch.setattr(rows, "FULL_COVER_UPDATE", 10)
    monkeypatch.setattr(rows, "COVER_SHARE", share)
    for n in range(EPISODES):
        path = tmp_path / "episodes" / f"e-{n}.md"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"---\nmemory_kind: episodic\nepisode_id: e-{n}\n---\nrun {n}\n")
    with Knowledge.open(tmp_path, tuning=Tuning(monitor_files=0)) as kb:
        kb.reindex()
        kb.write("pages/digest.md", page(range(0, 30)))  # through the write pipeline
        (tmp_path / "pages" / "other.md").write_text(page(range(25, 60)))  # behind its back
        indexed = dumps(kb.memory_report_document().value)
        assert indexed == dumps(kb.memory_report_document(use_index=False).value)
        assert kb.memory_report().unmerged_count == EPISODES - 60
        kb.write("pages/digest.md", page(range(100, 140)))  # what it cited before is uncovered
        (tmp_path / "pages" / "other.md").unlink()
        assert kb.memory_report().unmerged_count == EPISODES - 40
        assert dumps(kb.memory_report_document().value) == dumps(
            kb.memory_report_document(use_index=False).value
        )
