"""The memory report from the index equals the full scan after any sequence of changes.

A hypothesis state machine writes, deletes, renames, forgets and restores through
:class:`Knowledge` (real files, real git, real SQLite) and edits files behind its back — including
rewrites that keep the size and ``memory_status`` set by hand —
and after every step compares ``memory_report(use_index=True)`` with ``use_index=False``, and
the printed JSON of ``memory_report_document`` (the index's stored entry text) with both, with
and without a path prefix.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kiwifs.base.printed_json import dumps
from kiwifs.errors import KiwiError
from kiwifs.knowledge import Knowledge
from kiwifs.memory.status import is_superseded

PATHS = [
    "episodes/a.md",
    "episodes/b.md",
    "episodes/A/z.md",
    "episodes/a/y.md",
    "episodes/2024/run-1.md",
    'episodes/q"uote.md',  # entries JSON escapes: stored, not derived by the query
    "episodes/back\\slash.md",
    "episodes/caf\u00e9 \u65e5.md",
    "inbox/x.md",
    "concepts/c.md",
    "concepts/d.md",
    "index.md",
]
IDS = ["e1", "e2", " e1 ", "42", ""]


def printed_text(value: object) -> str:
    return dumps(value).decode()


ids = st.sampled_from(IDS)
kinds = st.sampled_from(["", "episodic", "semantic", "Consolidation", "other"])
statuses = st.sampled_from(["", "", "superseded", " Superseded ", "active"])
ref = st.one_of(
    st.builds(lambda t, i: {"type": t, "id": i}, st.sampled_from(["run", "episode", "x"]), ids),
    st.builds(
        lambda p: {"type": "note", "path": p},
        st.sampled_from([*PATHS, "/episodes/a.md", "./episodes/b.md", "../out.md"]),
    ),
    st.none(),
)


def _yaml_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    return '"' + str(value) + '"'


@st.composite
def documents(draw: st.DrawFn) -> str:
    """A markdown file: some frontmatter shapes the rules care about, or a broken block."""
    shape = draw(st.sampled_from(["fm", "fm", "fm", "none", "bad", "unterminated"]))
    body = draw(st.sampled_from(["body\n", "other words\n", ""]))
    if shape == "none":
        return body
    if shape == "bad":
        return "---\nkey: [oops\n---\n" + body
    if shape == "unterminated":
        return "---\nepisode_id: e1\n" + body
    lines = []
    kind = draw(kinds)
    if kind:
        lines.append(f"memory_kind: {kind}")
    status = draw(statuses)
    if status:
        lines.append(f"memory_status: {_yaml_value(status)}")
    if draw(st.booleans()):
        lines.append(f"episode_id: {_yaml_value(draw(ids))}")
    if draw(st.booleans()):
        lines.append(f"id: {draw(st.sampled_from(['e2', '7', 'zz']))}")
    merged = draw(st.sampled_from(["none", "list", "map"]))
    if merged == "list":
        items = draw(st.lists(ref, max_size=3))
        lines.append("merged-from:" + ("" if items else " []"))
        lines.extend(f"  - {_yaml_value(item)}" for item in items)
    elif merged == "map":
        lines.append("merged-from: {type: run, id: e1}")
    return "---\n" + "\n".join(lines) + "\n---\n" + body


class IndexMatchesScan(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="kiwifs-index-machine-"))
        Knowledge.init(self.tmp / "root", "blank")
        self.kb = Knowledge.open(self.tmp / "root")
        self.root = self.kb.root
        self.kb.reindex()  # the report uses an index only once one exists
        self.index_file = self.root / ".kiwi/state/index.db"

    def existing(self) -> list[str]:
        return [p for p in PATHS if (self.root / p).is_file()]

    @rule(path=st.sampled_from(PATHS), doc=documents())
    def write(self, path: str, doc: str) -> None:
        self.kb.write(path, doc)

    @rule(path=st.sampled_from(PATHS), doc=documents())
    def write_behind_its_back(self, path: str, doc: str) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(doc, encoding="utf-8")

    @precondition(lambda self: bool(self.existing()))
    @rule(data=st.data())
    def same_size_edit_behind_its_back(self, data: st.DataObject) -> None:
        """Flip the episode id in place without changing the size (or the mtime, if quick)."""
        path = data.draw(st.sampled_from(self.existing()))
        target = self.root / path
        raw = target.read_bytes()
        swapped = raw.replace(b"e1", b"e\x30").replace(b"e2", b"e1").replace(b"e\x30", b"e2")
        with open(target, "r+b") as fh:
            fh.write(swapped)

    @precondition(lambda self: bool(self.existing()))
    @rule(data=st.data(), through_kiwifs=st.booleans())
    def delete(self, data: st.DataObject, through_kiwifs: bool) -> None:
        path = data.draw(st.sampled_from(self.existing()))
        if through_kiwifs:
            self.kb.delete(path)
        else:
            (self.root / path).unlink()

    @precondition(lambda self: bool(self.existing()))
    @rule(data=st.data(), dst=st.sampled_from(PATHS))
    def rename(self, data: st.DataObject, dst: str) -> None:
        src = data.draw(st.sampled_from(self.existing()))
        try:
            self.kb.rename(src, dst)
        except KiwiError:
            pass  # the target exists or names a folder: refused, nothing changed

    @precondition(lambda self: bool(self.existing()))
    @rule(data=st.data(), reason=st.sampled_from([None, "stale"]))
    def forget(self, data: st.DataObject, reason: str | None) -> None:
        path = data.draw(st.sampled_from(self.existing()))
        try:
            self.kb.forget(path, reason)
        except KiwiError:
            return  # frontmatter that cannot be edited: refused, nothing changed
        assert is_superseded(self.kb.frontmatter(path))

    @precondition(lambda self: bool(self.existing()))
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(self.existing()))
        try:
            self.kb.restore(path)
        except KiwiError:
            return
        assert not is_superseded(self.kb.frontmatter(path))

    @rule()
    def move_a_folder_behind_its_back(self) -> None:
        src, dst = self.root / "episodes/a", self.root / "inbox/a"
        if src.is_dir() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.rename(src, dst)

    @rule(
        prefix=st.sampled_from([None, "episodes/a", "inbox/", "concepts"]),
        within=st.sampled_from([None, "episodes/a", "episodes/", "inbox/", "episodes/caf"]),
    )
    def compare_with_prefix(self, prefix: str | None, within: str | None) -> None:
        """``within``: a scoped key's path prefix, which the two answers confine alike."""
        fast = self.kb.memory_report(prefix, use_index=True, path_prefix=within)
        slow = self.kb.memory_report(prefix, use_index=False, path_prefix=within)
        assert fast.to_json() == slow.to_json()
        printed = printed_text(self.kb.memory_report_document(prefix, path_prefix=within).value)
        assert printed == json.dumps(slow.to_json(), indent=2, ensure_ascii=False)

    @invariant()
    def index_equals_scan(self) -> None:
        assert self.index_file.is_file(), "the machine must compare the index, not two scans"
        fast = self.kb.memory_report(limit=3, offset=1)
        slow = self.kb.memory_report(limit=3, offset=1, use_index=False)
        assert fast.to_json() == slow.to_json()
        assert printed_text(self.kb.memory_report_document(limit=3, offset=1).value) == (
            json.dumps(slow.to_json(), indent=2, ensure_ascii=False)
        )
        full = self.kb.memory_report()
        assert full.to_json() == self.kb.memory_report(use_index=False).to_json()
        printed = printed_text(self.kb.memory_report_document().value)
        assert printed == json.dumps(full.to_json(), indent=2, ensure_ascii=False)

    def teardown(self) -> None:
        self.kb.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


IndexMatchesScan.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestIndexMatchesScan = IndexMatchesScan.TestCase
