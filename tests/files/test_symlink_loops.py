"""Symlink loops (``loop.md -> loop.md``, ``a.md -> b.md -> a.md``) are refused paths.

The system answers ELOOP for them, which is not an I/O failure of the server: a read or write
of one is the caller's mistake (400, exit 2, a tool error), the walk and the memory report skip
it with a warning, and no other route is touched. REST runs in-process (the real app and its
lifespan), on a real versioned root.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from asgiclient import app_on
from kiwifs.errors import InvalidPath
from kiwifs.knowledge import Knowledge

API = "/api/kiwi"
LOOPS = ("loop.md", "a.md", "b.md", "deep/x.md")


@pytest.fixture
def looped(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    Knowledge.init(root, template="blank")
    (root / "ok.md").write_text("# fine words\n")
    os.symlink("loop.md", root / "loop.md")
    os.symlink("b.md", root / "a.md")
    os.symlink("a.md", root / "b.md")
    os.symlink("deep", root / "deep")  # a folder link to itself: deep/x.md leads nowhere
    return root


def test_the_library_refuses_a_loop_as_a_path(looped: Path) -> None:
    with Knowledge.open(looped) as kb:
        for rel in LOOPS:
            with pytest.raises(InvalidPath, match="symlink loop"):
                kb.read(rel)
            with pytest.raises(InvalidPath, match="symlink loop"):
                kb.write(rel, b"# new\n")
        assert os.readlink(looped / "loop.md") == "loop.md"  # the link is left as it was
        warnings = kb.memory_report().warnings
    assert {w for w in warnings if "loop" in w} == {
        f"cannot read {rel}: symlink loop" for rel in ("a.md", "b.md", "loop.md")
    }


def test_rest_answers_400_for_a_loop_and_every_other_route_as_usual(looped: Path) -> None:
    with app_on(looped) as client:
        for rel in LOOPS:
            for response in (
                client.get(f"{API}/file", params={"path": rel}),
                client.put(f"{API}/file", params={"path": rel}, content=b"# x\n"),
            ):
                assert response.status_code == 400, response.text
                assert "symlink loop" in response.json()["error"]
        assert client.get(f"{API}/file", params={"path": "ok.md"}).text == "# fine words\n"
        found = client.get(f"{API}/search", params={"q": "fine"}).json()["results"]
        assert [hit["path"] for hit in found] == ["ok.md"]
        for url in (f"{API}/tree", f"{API}/meta", f"{API}/memory/report", "/readyz", "/health"):
            assert client.get(url).status_code == 200, url
