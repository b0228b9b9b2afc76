"""Renames that keep links: a file or a folder moved in one commit, every link that led to a
moved file rewritten (each kind, in its own form), links in code left, claims following the
files, the move refused whole when it cannot be done, and a move cut short by a crash finished
at the next open. A property test moves folders of a random linked root and checks that every
link still leads where it led, and that the link index agrees with a re-parse of the files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gitrepo import commit_count as commits
from kiwifs import Knowledge
from kiwifs.errors import Conflict, InvalidPath, NotFound, PayloadTooLarge, UsageError
from kiwifs.git.repo import blob_id
from kiwifs.writes import journal
from linkrules import resolved


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def status(kb: Knowledge) -> str:
    """The paths whose content differs between HEAD and the disk (``""``: everything
    committed), read without git's index file, which kiwifs updates off the write path."""
    root = kb.root
    head = {}
    for line in git(root, "ls-tree", "-r", "HEAD").splitlines():
        meta, _, path = line.partition("\t")
        head[path] = meta.split()[2]
    disk = {
        p.relative_to(root).as_posix(): blob_id(p.read_bytes())
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }
    shown = {p: b for p, b in head.items() if not any(x.startswith(".") for x in p.split("/"))}
    return "".join(f"{p}\n" for p in sorted(set(shown) | set(disk)) if shown.get(p) != disk.get(p))


@pytest.fixture
def kb(tmp_path: Path) -> Knowledge:
    Knowledge.init(tmp_path / "r", template="blank")
    with Knowledge.open(tmp_path / "r") as opened:
        yield opened


def text(kb: Knowledge, path: str) -> str:
    return (kb.root / path).read_text()


def test_rename_dir_rewrites_every_kind_in_one_commit(kb: Knowledge) -> None:
    kb.write("notes/a.md", "# A\nSee [[notes/b]], [b](b.md), [o](../other.md#top), `[[notes/b]]`\n")
    kb.write("notes/sub/c.md", "up [a](../a.md) and [[notes/a.md#A|the a]]\n")
    kb.write("notes/img.png", b"\x89PNG")
    kb.write(
        "other.md",
        "---\nsuperseded_by: '[[notes/a]]'\ncontradicts:\n  - notes/b.md  # why\n"
        "derived-from:\n  - type: ingest\n    id: x\n    path: notes/sub/c.md\n---\n"
        "[[notes/a#A]] [[/notes/b]] [rel](notes/b.md) [[b]]\n```\n[[notes/a]]\n```\n",
    )
    kb.write("notes/b.md", "# B\nback to [[a]]\n")
    before = commits(kb.root)
    moved = kb.rename_dir("notes", "archive/n", actor="mover")
    assert moved.to_json() == {
        "from": "notes",
        "to": "archive/n",
        "renamed": 4,
        "updated_links": ["archive/n/a.md", "archive/n/sub/c.md", "other.md"],
    }
    assert commits(kb.root) == before + 1
    assert git(kb.root, "log", "-1", "--format=%an %s").startswith(
        "mover mover: rename notes/ \u2192 archive/n/ (4 files, links updated in 3 files)"
    )
    assert status(kb) == ""
    assert not (kb.root / "notes").exists()
    assert text(kb, "archive/n/a.md") == (
        "# A\nSee [[archive/n/b]], [b](b.md), [o](../../other.md#top), `[[notes/b]]`\n"
    )
    assert text(kb, "archive/n/sub/c.md") == "up [a](../a.md) and [[archive/n/a.md#A|the a]]\n"
    assert text(kb, "archive/n/b.md") == "# B\nback to [[a]]\n"  # by name: still resolves
    assert (kb.root / "archive/n/img.png").read_bytes() == b"\x89PNG"
    assert text(kb, "other.md") == (
        "---\nsuperseded_by: '[[archive/n/a]]'\ncontradicts:\n  - archive/n/b.md # why\n"
        "derived-from:\n  - type: ingest\n    id: x\n    path: archive/n/sub/c.md\n---\n"
        "[[archive/n/a#A]] [[/archive/n/b]] [rel](archive/n/b.md) [[b]]\n```\n[[notes/a]]\n```\n"
    )
    assert kb.broken_links() == []
    kinds = {(b.path, b.kind) for b in kb.backlinks("archive/n/a.md")}
    assert kinds == {
        ("archive/n/b.md", "wiki"),
        ("archive/n/sub/c.md", "wiki"),
        ("archive/n/sub/c.md", "markdown"),
        ("other.md", "wiki"),
        ("other.md", "superseded-by"),
    }


def test_rename_follows_a_name_link_only_when_the_name_changes(kb: Knowledge) -> None:
    kb.write("concepts/auth.md", "# Auth\n")
    kb.write("x/auth.md", "# another auth, found second\n")
    kb.write("uses.md", "[[auth]] [[auth|sign in]] [[concepts/auth]]\n")
    kb.write("other/uses.md", "[[x/auth]]\n")
    moved = kb.rename("concepts/auth.md", "concepts/login.md")
    assert moved.updated_links == ("uses.md",)
    assert moved.etag is not None and moved.path == "concepts/login.md"
    assert text(kb, "uses.md") == (
        "[[concepts/login]] [[concepts/login|sign in]] [[concepts/login]]\n"
    )
    assert text(kb, "other/uses.md") == "[[x/auth]]\n"
    same_name = kb.rename("concepts/login.md", "moved/login.md")
    assert same_name.updated_links == ("uses.md",)
    assert text(kb, "uses.md") == "[[moved/login]] [[moved/login|sign in]] [[moved/login]]\n"


def test_update_links_off_moves_only(kb: Knowledge) -> None:
    kb.write("d/t.md", "t\n")
    kb.write("s.md", "[[d/t]]\n")
    before = commits(kb.root)
    moved = kb.rename("d/t.md", "e/t.md", update_links=False)
    assert moved.updated_links == () and text(kb, "s.md") == "[[d/t]]\n"
    kb.rename_dir("e", "f", update_links=False)
    assert text(kb, "s.md") == "[[d/t]]\n" and commits(kb.root) == before + 2
    assert [(b.source, b.target) for b in kb.broken_links()] == [("s.md", "d/t")]


def test_a_renamed_episode_stays_merged(kb: Knowledge) -> None:
    kb.write("episodes/e1.md", "---\nmemory_kind: episodic\n---\nhi\n")
    kb.write("episodes/e2.md", "---\nmemory_kind: episodic\n---\nho\n")
    kb.write(
        "page.md",
        "---\nmerged-from:\n  - type: episode\n    path: ./episodes/e1.md\n"
        "  - type: episode\n    path: Episodes/E2.md\n---\nbody\n",
    )
    assert kb.memory_report().unmerged_count == 1
    kb.rename_dir("episodes", "episodes-2024")
    assert "path: episodes-2024/e1.md" in text(kb, "page.md")
    assert "path: Episodes/E2.md" in text(kb, "page.md")  # not a match the report counts
    report = kb.memory_report()
    assert report.unmerged_count == 1 and [e.path for e in report.unmerged] == [
        "episodes-2024/e2.md"
    ]


def test_claims_follow_and_a_claimed_linking_file_refuses(kb: Knowledge) -> None:
    kb.write("f/a.md", "a\n")
    kb.write("f/b.md", "b\n")
    kb.write("l.md", "[[f/a]]\n")
    kb.claim("f/a.md", "alice")
    kb.claim("l.md", "bob")
    before = commits(kb.root)
    with pytest.raises(Conflict):
        kb.rename_dir("f", "g", actor="alice")  # bob holds a file whose link would change
    assert commits(kb.root) == before and (kb.root / "f/a.md").exists()
    assert text(kb, "l.md").endswith("[[f/a]]\n")
    kb.release("l.md", "bob")
    kb.rename_dir("f", "g", actor="alice")
    assert {c.path for c in kb.claims_list()} == {"g/a.md"}
    with pytest.raises(Conflict):
        kb.rename_dir("g", "h", actor="carol")  # alice's claim moved with the file


@pytest.mark.parametrize(
    ("src", "dst", "error", "words"),
    [
        ("f", "f/inner", UsageError, "into itself"),
        ("f/a.md", "z", UsageError, "is a file"),
        ("nowhere", "z", NotFound, "source directory not found"),
        ("f", "g", Conflict, "already exists"),
        ("f", "g/a.md", Conflict, "already exists"),
        ("f", "../out", InvalidPath, ".."),
        ("f", ".hidden", InvalidPath, "hidden"),
    ],
)
def test_refused_moves_change_nothing(
    kb: Knowledge, src: str, dst: str, error: type[Exception], words: str
) -> None:
    kb.write("f/a.md", "a\n")
    kb.write("g/a.md", "a\n")
    before = commits(kb.root)
    with pytest.raises(error, match=words):
        kb.rename_dir(src, dst)
    assert commits(kb.root) == before and text(kb, "f/a.md") == "a\n"


def test_a_symlink_in_the_folder_refuses_the_move(kb: Knowledge) -> None:
    kb.write("f/a.md", "a\n")
    (kb.root / "f" / "l.md").symlink_to("a.md")
    with pytest.raises(UsageError, match="symlink"):
        kb.rename_dir("f", "g")
    assert (kb.root / "f/a.md").exists() and not (kb.root / "g").exists()


def test_a_folder_over_the_limit_is_refused(kb: Knowledge, monkeypatch: pytest.MonkeyPatch) -> None:
    import kiwifs.services.moving as moving

    kb.write("f/a.md", "a\n")
    kb.write("f/b.md", "b\n")
    monkeypatch.setattr(moving, "MAX_MOVE_FILES", 1)
    with pytest.raises(PayloadTooLarge, match="one at a time"):
        kb.rename_dir("f", "g")


def test_hidden_files_stay_and_a_folder_renamed_to_itself_is_a_no_op(kb: Knowledge) -> None:
    kb.write("f/a.md", "a\n")
    (kb.root / "f" / ".draft").write_text("x")
    before = commits(kb.root)
    assert kb.rename_dir("f", "f").renamed == 0 and commits(kb.root) == before
    kb.rename_dir("f", "g")
    assert (kb.root / "f" / ".draft").exists() and (kb.root / "g/a.md").exists()


def test_move_picks_file_or_folder(kb: Knowledge) -> None:
    kb.write("f/a.md", "a\n")
    assert kb.move("f", "g").renamed == 1 and kb.move("g/a.md", "g/b.md").etag is not None
    assert (kb.root / "g/b.md").read_text() == "a\n"


def test_a_move_cut_short_is_finished_at_the_next_open(tmp_path: Path) -> None:
    root = tmp_path / "r"
    Knowledge.init(root, template="blank")
    with Knowledge.open(root) as kb:
        kb.write("f/a.md", "a\n")
        kb.write("l.md", "[[f/a]]\n")
    # the process died after journaling the move, before touching any file
    intent = journal.BulkIntent(
        "mover",
        "mover: rename f/ \u2192 g/ (1 file)",
        None,
        (
            journal.BulkFile("f/a.md", None, b"a\n"),
            journal.BulkFile("g/a.md", b"a\n", None),
            journal.BulkFile("l.md", b"[[g/a]]\n", b"[[f/a]]\n"),
        ),
    )
    journal.write(root / ".kiwi" / "state", intent)
    assert journal.read(root / ".kiwi" / "state") == intent
    with Knowledge.open(root) as kb:
        kb.write("later.md", "x\n")  # a write settles the journal first
        assert not (root / "f").exists() and (root / "g/a.md").read_text() == "a\n"
        assert (root / "l.md").read_text() == "[[g/a]]\n"
        assert [b.path for b in kb.backlinks("g/a.md")] == ["l.md"]
    assert "rename f/" in git(root, "log", "--format=%s")
    assert git(root, "status", "--porcelain") == ""


# -- the property: every link still leads where it led -------------------------------------

FOLDERS = ["a", "a/b", "c"]
STEMS = ["p", "q", "r"]


def resolved_edges(root: Path) -> set[tuple[str, str]]:
    """(source, target) for every link of every page that resolves, from the files alone."""
    return {(src, hit) for src, _, hit in resolved(root) if hit is not None}


page = st.tuples(st.sampled_from(FOLDERS), st.sampled_from(STEMS))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(page, st.lists(st.tuples(page, st.sampled_from(["path", "md"])), max_size=3)),
        min_size=2,
        max_size=7,
        unique_by=lambda t: t[0],
    ),
    st.sampled_from([("a", "z"), ("a/b", "c/d"), ("c", "a/b/c2"), ("a", "x/y/a")]),
)
def test_every_link_leads_where_it_led(
    tmp_path_factory: pytest.TempPathFactory, pages: list, move: tuple[str, str]
) -> None:
    root = tmp_path_factory.mktemp("mv") / "r"
    Knowledge.init(root, template="blank")
    with Knowledge.open(root) as kb:
        for (folder, stem), links in pages:
            here = f"{folder}/{stem}.md"
            parts = []
            for (tf, ts), form in links:
                target = f"{tf}/{ts}.md"
                if form == "path":
                    parts.append(f"[[{tf}/{ts}]]")
                else:
                    parts.append(f"[l]({'../' * here.count('/')}{target})")
            kb.write(here, " ".join(parts) + "\n")
        src, dst = move
        assume((root / src).is_dir() and not (root / dst).exists())
        before = resolved_edges(root)

        def moved(path: str) -> str:
            return dst + path[len(src) :] if path.startswith(src + "/") else path

        kb.rename_dir(src, dst)
        after = resolved_edges(root)
        assert after == {(moved(s), moved(t)) for s, t in before}
        targets = {t for _, t in after}
        assert {(b.path, t) for t in targets for b in kb.backlinks(t)} == after
        assert status(kb) == ""
