"""Reading and writing files of a root: only regular files, only where the path layer allows.

The path layer (``paths.confine``) resolves symlinks before use; :func:`storage.open_regular`
checks again on the opened descriptor, so a folder swapped for a symlink between the two cannot
lead a read into ``.git``. A FIFO is never opened in a way that blocks.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fifovalve import fifo_valve
from kiwifs.base.paths import (
    NOT_REGULAR_FILE,
    LinkRefused,
    NotRegularFile,
    open_parent,
    open_regular,
)
from kiwifs.errors import InvalidPath, NotFound
from kiwifs.files.storage import Storage


@pytest.fixture
def hostile_folder(tmp_path: Path) -> Path:
    """Not a kiwifs root: a folder with a ``.git``, links into and out of it, and a FIFO."""
    root = tmp_path / "root"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "notes").mkdir()
    (root / "notes" / "a.md").write_text("a\n")
    os.symlink(".git", root / "gitlink")
    os.symlink(".git/config", root / "leak.md")
    os.symlink("notes/a.md", root / "alias.md")
    os.mkfifo(root / "pipe.md")
    return root


def git_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / ".git").rglob("*"))


def test_reading_a_fifo_is_refused_without_blocking(hostile_folder: Path) -> None:
    with (
        fifo_valve(hostile_folder / "pipe.md"),
        pytest.raises(InvalidPath, match=NOT_REGULAR_FILE),
    ):
        Storage(hostile_folder).read("pipe.md")


def test_writing_over_a_fifo_is_refused_and_keeps_it(hostile_folder: Path) -> None:
    with pytest.raises(InvalidPath, match=NOT_REGULAR_FILE):
        Storage(hostile_folder).write("pipe.md", b"x")
    assert stat.S_ISFIFO(os.lstat(hostile_folder / "pipe.md").st_mode)
    assert (
        sorted(p.name for p in hostile_folder.iterdir() if p.name.startswith(".kiwi-write")) == []
    )


def test_a_folder_is_not_a_file(hostile_folder: Path) -> None:
    with pytest.raises(NotFound, match="is a folder"):
        Storage(hostile_folder).read("notes")
    with pytest.raises(InvalidPath, match="is a folder"):
        Storage(hostile_folder).write("notes", b"x")


@pytest.mark.parametrize("rel", ["gitlink/config", "gitlink/hooks/pre-commit", "leak.md"])
def test_no_read_write_or_delete_through_a_link_into_git(hostile_folder: Path, rel: str) -> None:
    storage = Storage(hostile_folder)
    before = git_files(hostile_folder)
    config = (hostile_folder / ".git" / "config").read_bytes()
    with pytest.raises(InvalidPath, match="hidden path"):
        storage.read(rel)
    with pytest.raises(InvalidPath, match="hidden path"):
        storage.write(rel, b"owned")
    with pytest.raises(InvalidPath, match="hidden path"):
        storage.delete(rel)
    assert git_files(hostile_folder) == before
    assert (hostile_folder / ".git" / "config").read_bytes() == config


def test_a_link_to_a_visible_file_reads_and_writing_it_replaces_the_link(
    hostile_folder: Path,
) -> None:
    storage = Storage(hostile_folder)
    assert storage.read("alias.md") == b"a\n"
    data, st = storage.read_with_stat("alias.md")
    assert data == b"a\n" and stat.S_ISREG(st.st_mode)
    storage.write("alias.md", b"b\n")
    assert not (hostile_folder / "alias.md").is_symlink()
    assert (hostile_folder / "notes" / "a.md").read_bytes() == b"a\n"


def test_open_regular_checks_the_opened_descriptor(hostile_folder: Path) -> None:
    """Past the path layer (as after a swap): the descriptor itself is where the check holds."""
    real_root = os.path.realpath(hostile_folder)
    with pytest.raises(LinkRefused, match="hidden path"):
        open_regular(str(hostile_folder / "gitlink" / "config"), real_root)
    with pytest.raises(LinkRefused, match="outside the root"):
        open_regular("/etc/hostname", real_root)
    with (
        fifo_valve(hostile_folder / "pipe.md"),
        pytest.raises(NotRegularFile, match=NOT_REGULAR_FILE),
    ):
        open_regular(str(hostile_folder / "pipe.md"), real_root)
    with pytest.raises(IsADirectoryError):
        open_regular(str(hostile_folder / "notes"), real_root)
    fd, st = open_regular(str(hostile_folder / "alias.md"), real_root)
    try:
        assert stat.S_ISREG(st.st_mode)
        assert os.read(fd, 10) == b"a\n"
    finally:
        os.close(fd)


def test_open_parent_checks_every_folder_it_opens(hostile_folder: Path) -> None:
    """Writes create their temp file relative to the folder opened this way, so a folder
    swapped for a link after the path layer looked still cannot lead a write into ``.git``."""
    real_root = os.path.realpath(hostile_folder)
    before = git_files(hostile_folder)
    os.symlink(".git", hostile_folder / "swap")  # as if swapped in after the path check
    for rel in ("swap/x.md", "swap/new/x.md", "gitlink/hooks/pre-commit"):
        with pytest.raises(LinkRefused, match="hidden path"):
            open_parent(real_root, rel, create=True)
    assert git_files(hostile_folder) == before  # not even a folder was made in .git
    os.symlink(hostile_folder.parent, hostile_folder / "up")
    with pytest.raises(LinkRefused, match="outside the root"):
        open_parent(real_root, "up/x.md", create=True)
    fd = open_parent(real_root, "made/here/x.md", create=True)
    try:
        assert os.listdir(fd) == [] and (hostile_folder / "made" / "here").is_dir()
    finally:
        os.close(fd)
    with pytest.raises(FileNotFoundError):
        open_parent(real_root, "absent/x.md", create=False)


def test_a_write_follows_folder_links_only_where_the_path_layer_allows(
    hostile_folder: Path, tmp_path: Path
) -> None:
    """A write opens plain folders without following links and follows (then checks) only a
    folder that is a link: the same answers as checking the resolved path before writing."""
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, hostile_folder / "out")
    os.symlink("notes", hostile_folder / "inner")
    os.symlink(tmp_path / "nowhere.md", hostile_folder / "dangling-out.md")
    os.symlink("notes/later.md", hostile_folder / "dangling-in.md")
    storage = Storage(hostile_folder)
    for rel in ("out/x.md", "out/deeper/x.md", "dangling-out.md"):
        with pytest.raises(InvalidPath, match=r"path outside root \(symlink\): "):
            storage.write(rel, b"owned")
    assert os.listdir(outside) == [] and not (tmp_path / "nowhere.md").exists()
    assert os.path.islink(hostile_folder / "dangling-out.md")
    storage.write("inner/b.md", b"b\n")  # a link inside the root: followed
    assert (hostile_folder / "notes" / "b.md").read_bytes() == b"b\n"
    storage.write("dangling-in.md", b"c\n")  # a dangling link inside the root: replaced
    assert not (hostile_folder / "dangling-in.md").is_symlink()
    assert not (hostile_folder / "notes" / "later.md").exists()
    storage.write("new/folders/d.md", b"d\n")  # missing folders are made on the way
    assert (hostile_folder / "new" / "folders" / "d.md").read_bytes() == b"d\n"
    (hostile_folder / "notes" / "file.md").write_text("f\n")
    with pytest.raises(InvalidPath, match="is a file, not a folder"):
        storage.write("notes/file.md/e.md", b"e\n")


@pytest.mark.parametrize(
    "rel", ["../outside.md", "notes/../../outside.md", ".git/hooks/x", "notes/.git/x", "/x.md"]
)
def test_a_write_takes_only_folders_a_path_may_name(
    hostile_folder: Path, tmp_path: Path, rel: str
) -> None:
    """Inner callers (a bulk journal read back after a crash, ``init``'s ``.gitkeep`` files)
    name paths too: since a write opens its folders by name, none may be ``..``, empty or
    hidden. A hidden file name in a plain folder stays writable, as before."""
    before = git_files(hostile_folder)
    with pytest.raises(InvalidPath):
        Storage(hostile_folder).write(rel, b"owned")
    assert (
        not (tmp_path / "outside.md").exists() and not (hostile_folder / "notes" / ".git").exists()
    )
    assert git_files(hostile_folder) == before
    Storage(hostile_folder).write("notes/.gitkeep", b"")
    assert (hostile_folder / "notes" / ".gitkeep").read_bytes() == b""


def test_a_read_that_fails_is_refused_as_a_path_first(hostile_folder: Path, tmp_path: Path) -> None:
    """A read is checked on the descriptor it opened; when the open fails, the path's own
    refusal still comes first (400, not 404), as when every path was checked before use."""
    os.symlink(tmp_path, hostile_folder / "up")
    storage = Storage(hostile_folder)
    for rel in ("gitlink/absent.md", "gitlink", "gitlink/hooks", "leak.md/x.md"):
        with pytest.raises(InvalidPath, match="hidden path"):
            storage.read(rel)
    with pytest.raises(InvalidPath, match="outside root"):
        storage.read("up/absent.md")
    with pytest.raises(NotFound, match="file not found"):
        storage.read("notes/absent.md")
    with pytest.raises(NotFound, match="is a folder"):
        storage.read("notes")
    assert storage.read_optional("notes/absent.md") is None


def test_read_many_reads_what_read_reads_and_nothing_else(
    hostile_folder: Path, tmp_path: Path
) -> None:
    """A brief reads its pages in one call: the same bytes as one read each, and ``None`` for
    every path one read refuses (a FIFO, a folder, links into ``.git`` or out of the root, a
    missing file), never an error."""
    (tmp_path / "outside.md").write_text("secret\n")
    os.symlink(tmp_path / "outside.md", hostile_folder / "out.md")
    os.symlink("../outside.md", hostile_folder / "notes" / "up.md")
    (hostile_folder / "empty.md").write_text("")
    (hostile_folder / "dir.md").mkdir()
    rels = ["notes/a.md", "alias.md", "empty.md", "leak.md", "gitlink/config", "out.md"]
    rels += ["notes/up.md", "pipe.md", "dir.md", "missing.md", "notes/missing/x.md"]
    storage = Storage(hostile_folder)
    with fifo_valve(hostile_folder / "pipe.md"):
        many = storage.read_many(rels)
        one_by_one = [storage._read_or_none(rel) for rel in rels]
    assert many == one_by_one
    assert many[:3] == [b"a\n", b"a\n", b""]
    assert many[3:] == [None] * (len(rels) - 3)
