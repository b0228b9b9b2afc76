"""Canonical, confined paths and merged-from paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiwifs.base.paths import (
    HIDDEN,
    OUTSIDE,
    canonical,
    canonical_dir,
    confine,
    is_inside,
    normalize_prefix,
    normalize_ref_path,
    refusal,
)
from kiwifs.errors import InvalidPath, UsageError


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("a.md", "a.md"),
        ("/a.md", "a.md"),
        ("dir/sub/a.md", "dir/sub/a.md"),
        ("/dir/a.md", "dir/a.md"),
        ("with space.md", "with space.md"),
        (" lead and trail .md", " lead and trail .md"),
        ("caf\u00e9/\U0001f95d.md", "caf\u00e9/\U0001f95d.md"),
        ("back\\slash.md", "back\\slash.md"),
        ("x..y.md", "x..y.md"),
        ("a./b.md", "a./b.md"),
        ("x" * 255, "x" * 255),
        ("\u00e9" * 127 + "x", "\u00e9" * 127 + "x"),
        ("folder", "folder"),
    ],
    ids=[
        "simple",
        "one-leading-slash-dropped",
        "nested",
        "nested-leading-slash",
        "inner-space",
        "outer-spaces-significant",
        "unicode",
        "backslash-is-a-name-byte",
        "dots-inside-name",
        "trailing-dot-in-name",
        "255-byte-segment",
        "255-byte-utf8-segment",
        "no-suffix",
    ],
)
def test_canonical_accepts(given: str, expected: str) -> None:
    assert canonical(given) == expected


@pytest.mark.parametrize(
    "given",
    [
        "",
        "/",
        "//a.md",
        "a//b.md",
        "a/",
        "a\x00b.md",
        "a\nb.md",
        "a\rb.md",
        "a\tb.md",
        "a\x1fb.md",
        "a\x7fb.md",
        "..",
        "../a.md",
        "a/../b.md",
        "a/..",
        ".",
        "./a.md",
        "a/./b.md",
        ".git/config",
        ".kiwi/config.toml",
        "a/.hidden/x.md",
        ".foo.md",
        "...",
        "a/.b.md",
        "x" * 256,
        "dir/" + "\u00e9" * 128,
    ],
    ids=[
        "empty",
        "slash-only",
        "two-leading-slashes",
        "empty-segment",
        "trailing-slash",
        "nul",
        "newline",
        "carriage-return",
        "tab",
        "unit-separator",
        "delete",
        "dotdot",
        "leading-dotdot",
        "inner-dotdot",
        "trailing-dotdot",
        "dot",
        "leading-dot-segment",
        "inner-dot-segment",
        "git-dir",
        "kiwi-dir",
        "hidden-folder",
        "hidden-file",
        "three-dots-is-hidden",
        "hidden-nested-file",
        "256-byte-segment",
        "256-byte-utf8-segment",
    ],
)
def test_canonical_refuses(given: str) -> None:
    with pytest.raises(InvalidPath) as info:
        canonical(given)
    assert isinstance(info.value, UsageError)
    assert info.value.message


def test_canonical_refuses_non_strings() -> None:
    with pytest.raises(InvalidPath):
        canonical(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, ""), ("", ""), ("/", ""), ("//", ""), ("a/", "a"), ("/a/b/", "a/b")],
    ids=["none", "empty", "slash", "two-slashes", "trailing-slash", "both-slashes"],
)
def test_canonical_dir(given: str | None, expected: str) -> None:
    assert canonical_dir(given) == expected


@pytest.mark.parametrize(
    "given", ["a/../b", ".git", "a/.x/"], ids=["dotdot", "hidden", "hidden-sub"]
)
def test_canonical_dir_refuses(given: str) -> None:
    with pytest.raises(InvalidPath):
        canonical_dir(given)


# ---------------------------------------------------------------------------------------------
# confine: symlinks may not lead out of the root


@pytest.fixture
def linked_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "inside").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.md").write_text("secret\n")
    (root / "inside" / "a.md").write_text("a\n")
    os.symlink(outside, root / "out-dir")
    os.symlink(outside / "secret.md", root / "out-file.md")
    os.symlink(root / "inside", root / "in-dir")
    os.symlink("inside/a.md", root / "in-file.md")
    os.symlink(tmp_path / "missing", root / "dangling-out")
    return root


@pytest.mark.parametrize(
    "rel",
    ["out-dir", "out-dir/secret.md", "out-dir/new.md", "out-dir/new/deeper.md", "out-file.md"],
    ids=["dir-link", "file-through-dir-link", "new-file-through-link", "new-nested", "file-link"],
)
def test_confine_refuses_symlink_escape(linked_root: Path, rel: str) -> None:
    with pytest.raises(InvalidPath, match="outside root"):
        confine(linked_root, canonical(rel))


@pytest.mark.parametrize(
    "rel",
    ["inside/a.md", "in-dir/a.md", "in-file.md", "new.md", "new/folder/x.md", ""],
    ids=["plain", "through-inner-dir-link", "inner-file-link", "new-file", "new-nested", "root"],
)
def test_confine_allows_inside(linked_root: Path, rel: str) -> None:
    target = confine(linked_root, rel)
    assert is_inside(linked_root, target)
    real_root = Path(os.path.realpath(linked_root))
    assert target == (real_root / rel if rel else real_root)


def test_confine_with_root_behind_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "alias")
    assert confine(tmp_path / "alias", "a.md") == real / "a.md"


@pytest.fixture
def hidden_linked_root(tmp_path: Path) -> Path:
    """A root whose links lead into its own hidden folders (``.git``, ``.kiwi``, ``.hidden``)."""
    root = tmp_path / "root"
    for folder in (".git/hooks", ".kiwi/state", ".hidden", "a/b", "visible"):
        (root / folder).mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / ".kiwi" / "config.toml").write_text("")
    (root / ".hidden" / "x.md").write_text("x")
    (root / "visible" / "v.md").write_text("v")
    os.symlink(".git", root / "gitlink")
    os.symlink(".kiwi", root / "kiwilink")
    os.symlink(".git/config", root / "leak.md")
    os.symlink(".git/hooks/post-commit", root / "hooked.md")  # dangling
    os.symlink("../../.git", root / "a" / "b" / "up")
    os.symlink(".hidden", root / "vis")
    os.symlink(root / ".hidden" / "x.md", root / "abs.md")
    os.symlink("visible", root / "fine")
    os.symlink("visible/v.md", root / "fine.md")
    return root


@pytest.mark.parametrize(
    "rel",
    [
        "gitlink",
        "gitlink/config",
        "gitlink/hooks/post-commit",
        "gitlink/new/deeper.md",
        "kiwilink/config.toml",
        "kiwilink/state/x.md",
        "leak.md",
        "hooked.md",
        "a/b/up/config",
        "a/b/up/new.md",
        "vis/x.md",
        "abs.md",
    ],
)
def test_confine_refuses_a_link_into_a_hidden_path(hidden_linked_root: Path, rel: str) -> None:
    with pytest.raises(InvalidPath, match="hidden path"):
        confine(hidden_linked_root, canonical(rel))


@pytest.mark.parametrize("rel", ["fine/v.md", "fine.md", "fine/new.md", "a/b/new.md"])
def test_confine_allows_a_link_to_a_visible_path(hidden_linked_root: Path, rel: str) -> None:
    assert confine(hidden_linked_root, rel) == Path(os.path.realpath(hidden_linked_root)) / rel


def test_a_root_inside_a_hidden_folder_is_not_hidden_itself(tmp_path: Path) -> None:
    root = tmp_path / ".store" / "kb"
    (root / "d").mkdir(parents=True)
    os.symlink("d", root / "link")
    assert confine(root, "link/a.md") == root / "link" / "a.md"
    assert refusal(str(root), str(root / "d" / "a.md")) is None
    assert refusal(str(root), str(root)) is None
    assert refusal(str(root), str(root / ".git" / "config")) == HIDDEN
    assert refusal(str(root), str(tmp_path / ".store")) == OUTSIDE
    assert refusal("/", "/etc/passwd") is None
    assert refusal("/", "/.git/config") == HIDDEN


def test_is_inside_does_not_accept_a_sibling_with_the_same_prefix(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root-other").mkdir()
    assert not is_inside(tmp_path / "root", tmp_path / "root-other" / "x")
    assert is_inside(tmp_path / "root", tmp_path / "root")


# ---------------------------------------------------------------------------------------------
# merged-from paths


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("episodes/a.md", "episodes/a.md"),
        ("./episodes/a.md", "episodes/a.md"),
        ("/episodes/a.md", "episodes/a.md"),
        ("episodes//a.md", "episodes/a.md"),
        ("episodes/./a.md", "episodes/a.md"),
        (" episodes/a.md ", "episodes/a.md"),
        ("episodes\\a.md", "episodes/a.md"),
        ("episodes/a.md/", "episodes/a.md"),
        ("Episodes/A.md", "Episodes/A.md"),
        ("episodes/...md", "episodes/...md"),
        ("", ""),
        ("./", ""),
        ("/", ""),
        ("..", None),
        ("../a.md", None),
        ("a/../b.md", None),
        ("a\\..\\b.md", None),
        ("a/ .. /b.md", "a/ .. /b.md"),
    ],
    ids=[
        "plain",
        "dot-slash",
        "leading-slash",
        "double-slash",
        "dot-segment",
        "padded",
        "backslash",
        "trailing-slash",
        "case-kept",
        "dots-in-name",
        "empty",
        "dot-slash-only",
        "slash-only",
        "dotdot",
        "leading-dotdot",
        "inner-dotdot",
        "backslash-dotdot",
        "padded-dotdot-is-a-name",
    ],
)
def test_normalize_ref_path(given: str, expected: str | None) -> None:
    assert normalize_ref_path(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, ""),
        ("", ""),
        ("  ", ""),
        ("./", ""),
        ("/", ""),
        ("raw", "raw/"),
        ("./raw", "raw/"),
        ("/raw/", "raw/"),
        ("team\\episodes", "team/episodes/"),
    ],
    ids=["none", "empty", "blank", "dot-slash", "slash", "bare", "dot-prefixed", "slashed", "bs"],
)
def test_normalize_prefix(given: str | None, expected: str) -> None:
    assert normalize_prefix(given) == expected


@pytest.mark.parametrize("given", ["../x", "raw/../../x", ".."], ids=["up", "nested-up", "dotdot"])
def test_normalize_prefix_refuses_parent_segments(given: str) -> None:
    with pytest.raises(InvalidPath, match=r"\.\."):
        normalize_prefix(given)
