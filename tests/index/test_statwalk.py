"""Walk primitives: folder digests, and one path probed the way the walk would see it."""

from __future__ import annotations

import os
from pathlib import Path

from kiwifs.index.folders import folder_digest, probe


def test_folder_digest_depends_on_every_name_and_signature() -> None:
    base = folder_digest([b"a.md", b"b.md"], [1, 2])
    assert base == folder_digest([b"a.md", b"b.md"], [1, 2])
    assert base != folder_digest([b"a.md", b"c.md"], [1, 2])
    assert base != folder_digest([b"a.md", b"b.md"], [1, 3])
    assert base != folder_digest([b"a.md"], [1])
    assert folder_digest([], []) != folder_digest([b""], [0])


def test_probe_sees_one_path_as_the_walk_does(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d/a.md").write_text("x")
    (tmp_path / "real").mkdir()
    (tmp_path / "real/b.md").write_text("x")
    os.symlink(tmp_path / "real", tmp_path / "linked")
    os.symlink("/etc/hostname", tmp_path / "out.md")
    found = probe(tmp_path, "d/a.md")
    assert found is not None and found.exists and found.error is None
    assert found.key == b"d\0a.md"
    missing = probe(tmp_path, "d/none.md")
    assert missing is not None and not missing.exists
    through_link = probe(tmp_path, "linked/b.md")  # the walk does not enter symlinked folders
    assert through_link is not None and not through_link.exists
    outside = probe(tmp_path, "out.md")
    assert outside is not None and outside.error == "symlink points outside the root"
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    os.symlink(".git/config", tmp_path / "git.md")
    into_git = probe(tmp_path, "git.md")
    assert into_git is not None and into_git.error == "symlink points to a hidden path"
    assert probe(tmp_path, ".hidden/x.md") is None
    assert probe(tmp_path, "d/a.txt") is None
