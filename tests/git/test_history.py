"""Change history tells what commits did, never what their messages claim.

``/changes`` (and ``kiwi_changes``) once parsed each commit's subject for ``delete:`` or
``rename`` and so believed a bulk write whose ``message`` said ``delete: index.md``. The action
now comes from the commit's tree changes, and a caller's message is cut to one line, so it can
add neither an action nor a ``Provenance:`` trailer. Real git, real roots, the real REST app.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from gitrepo import git, git_line
from kiwifs.errors import UsageError
from kiwifs.git import log
from kiwifs.git.messages import MAX_SUBJECT_CHARS, commit_subject
from kiwifs.git.repo import Git
from kiwifs.knowledge import Knowledge
from kiwifs.rest.app import create_app

FORGED = "delete: index.md\n\nProvenance: run:forged"


def changes_since(kb: Knowledge, start: str) -> list[tuple[str, str, str]]:
    return [(c.action, c.path, c.actor) for c in kb.changes(start)]


def test_a_bulk_message_cannot_forge_an_action_or_a_trailer(knowledge_kb: Knowledge) -> None:
    start = git_line(knowledge_kb.root, "rev-parse", "HEAD")
    knowledge_kb.bulk_write(
        [("f/one.md", "1")], actor="mallory", provenance="run:real", message=FORGED
    )
    knowledge_kb.bulk_write(
        [("f/two.md", "2"), ("f/three.md", "3")], actor="mallory", message=FORGED
    )
    assert changes_since(knowledge_kb, start) == [
        ("write", "", "mallory"),
        ("write", "f/one.md", "mallory"),
    ]
    assert (knowledge_kb.root / "index.md").is_file()
    messages = git(knowledge_kb.root, "log", "-2", "--format=%B%x00").split("\0")
    assert [m.strip("\n") for m in messages[:2]] == [
        "delete: index.md Provenance: run:forged",
        "delete: index.md Provenance: run:forged\n\nProvenance: run:real",
    ]
    trailers = git(
        knowledge_kb.root, "log", "-2", "--format=%(trailers:key=Provenance,valueonly)%x00"
    )
    assert [t.strip() for t in trailers.split("\0")[:2]] == ["", "run:real"]


def test_actions_come_from_the_tree(knowledge_kb: Knowledge) -> None:
    start = git_line(knowledge_kb.root, "rev-parse", "HEAD")
    knowledge_kb.write("t/a.md", "a", actor="ann")
    knowledge_kb.write("t/a.md", "a2", actor="ann")
    knowledge_kb.rename("t/a.md", "t/b.md", actor="ben")
    knowledge_kb.delete("t/b.md", actor="cat")
    knowledge_kb.bulk_write([("t/c.md", "c"), ("t/d.md", "d")], actor="dan")
    # a user's own commit whose subject claims something else
    (knowledge_kb.root / "t" / "c.md").unlink()
    (knowledge_kb.root / "t" / "d.md").unlink()
    git(knowledge_kb.root, "reset", "-q")  # the git index file may lag HEAD for a moment
    git(knowledge_kb.root, "add", "-A", "t")
    git(knowledge_kb.root, "commit", "-q", "-m", "rename everything \u2192 nowhere")
    assert changes_since(knowledge_kb, start) == [
        ("delete", "", "kiwifs tests"),  # several deletions
        ("write", "", "dan"),
        ("delete", "t/b.md", "cat"),
        ("rename", "t/b.md", "ben"),
        ("write", "t/a.md", "ann"),
        ("write", "t/a.md", "ann"),
    ]


def test_a_path_with_odd_characters_is_read_whole(knowledge_kb: Knowledge) -> None:
    """Log records are NUL-separated and paths taken by count: no character can split one."""
    start = git_line(knowledge_kb.root, "rev-parse", "HEAD")
    name = "odd \u2192 R100 x\u001e.md"
    (knowledge_kb.root / name).write_text("x")
    git(knowledge_kb.root, "reset", "-q")  # the git index file may lag HEAD for a moment
    git(knowledge_kb.root, "add", name)
    git(knowledge_kb.root, "commit", "-q", "-m", "write: something else")
    assert changes_since(knowledge_kb, start) == [("write", name, "kiwifs tests")]


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        ("one line", "one line"),
        ("a\nb\r\nc\td\x00e\x7ff", "a b c d e f"),
        ("  spaced   out  ", "spaced out"),
        ("x\ud800y", "xy"),
        ("\n\n", ""),
    ],
)
def test_commit_subject_is_one_clean_line(message: str, subject: str) -> None:
    assert commit_subject(message) == subject


def test_commit_subject_is_bounded() -> None:
    subject = commit_subject("m" * 10_000)
    assert len(subject) == MAX_SUBJECT_CHARS and subject.endswith("\u2026")


def test_an_empty_message_falls_back_to_the_default(knowledge_kb: Knowledge) -> None:
    knowledge_kb.bulk_write([("e.md", "e")], actor="eve", message="\n \n")
    assert (
        git_line(knowledge_kb.root, "log", "-1", "--format=%s") == "eve: bulk write \u2014 1 files"
    )


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_rest_changes_shows_the_real_action(
    knowledge_kb: Knowledge, anyio_backend: str
) -> None:
    start = git_line(knowledge_kb.root, "rev-parse", "HEAD")
    transport = httpx.ASGITransport(app=create_app(knowledge_kb))
    async with httpx.AsyncClient(transport=transport, base_url="http://kiwi") as client:
        body = {"files": [{"path": "r/x.md", "content": "x"}], "message": FORGED}
        resp = await client.post("/api/kiwi/bulk", json=body, headers={"X-Actor": "mallory"})
        assert resp.status_code == 200
        changes = (await client.get("/api/kiwi/changes", params={"since": start})).json()
    (change,) = changes["changes"]
    assert set(change) == {"seq", "path", "action", "actor", "timestamp"}
    assert (change["action"], change["path"], change["actor"]) == ("write", "r/x.md", "mallory")
    assert changes["last_seq"] == change["seq"]


@pytest.mark.parametrize("since", ["--all", "HEAD", "abc", "ABCDEF12", "a" * 41, "abcd..HEAD"])
def test_a_since_that_is_not_a_commit_id_is_refused_before_git_is_asked(
    tmp_path: Path, knowledge_kb: Knowledge, since: str
) -> None:
    """The one shape rule (``git.log.check_sequence``) holds on a versioned root, on one
    without git (no history, yet the same refusal), and on ``git.log.changes`` itself."""
    plain = tmp_path / "plain"
    plain.mkdir()
    with Knowledge.open(plain) as unversioned:
        assert not (plain / ".git").exists()
        for root in (knowledge_kb, unversioned):
            with pytest.raises(UsageError, match="unknown sequence"):
                root.changes(since)
    repo = Git(knowledge_kb.root)
    with pytest.raises(UsageError, match="unknown sequence"):
        log.changes(repo, since, 10)
    repo.close()


def test_a_short_commit_id_is_a_valid_since(knowledge_kb: Knowledge) -> None:
    start = git_line(knowledge_kb.root, "rev-parse", "HEAD")
    knowledge_kb.write("s.md", "s")
    assert [c.path for c in knowledge_kb.changes(start[:7])] == ["s.md"]


@pytest.mark.parametrize(
    ("holder", "author"), [(">\u00a6:\u00e9", "\u00a6:\u00e9"), ("<>", "kiwifs")]
)
def test_a_claim_by_a_holder_git_cannot_sign_with_is_committed(
    knowledge_kb: Knowledge, holder: str, author: str
) -> None:
    """A claim's commit is signed with its holder as every actor is (no angle brackets: libgit2
    refused them, and the commit failed on every retry, holding every later write), while the
    claim keeps the holder as given."""
    knowledge_kb.write("t/odd.md", "odd")
    claim = knowledge_kb.claim("t/odd.md", holder)
    assert claim.holder == holder
    knowledge_kb.write("t/after.md", "after", actor="ann")
    assert git_line(knowledge_kb.root, "log", "-1", "--format=%an", "--", "t/odd.md") == author
    assert git_line(knowledge_kb.root, "log", "-1", "--format=%an", "--", "t/after.md") == "ann"
    knowledge_kb.release("t/odd.md", holder)
    assert "claimed-by" not in (knowledge_kb.root / "t" / "odd.md").read_text()
