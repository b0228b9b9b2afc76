"""The space registry (``kiwifs.server.spaces``): names, roots, persistence, soft delete, and the
bound on open spaces, on real roots with real git and SQLite, with a clock the test moves."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiwifs.config import parse_config
from kiwifs.errors import ConfigError, Conflict, UnknownSpace, UsageError
from kiwifs.knowledge import Knowledge
from kiwifs.server.spaces import SpaceRegistry, space_root
from kiwifs.tuning import Tuning

SMALL = Tuning(commit_process=False, max_open_spaces=2, space_idle=60.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def default(root: Path) -> Iterator[Knowledge]:
    with Knowledge.open(root, tuning=SMALL) as kb:
        yield kb


@pytest.fixture
def registry(default: Knowledge, clock: Clock) -> Iterator[SpaceRegistry]:
    spaces = SpaceRegistry(default, clock=clock, dashboard=False)
    yield spaces
    spaces.close()


def test_a_new_space_is_laid_out_as_init_does_in_dot_spaces(
    registry: SpaceRegistry, root: Path
) -> None:
    info = registry.create("team-a")
    space = root / ".spaces" / "team-a"
    assert info.root == space.resolve() and info.name == "team-a"
    assert (space / ".git").is_dir() and (space / ".kiwi" / "config.toml").is_file()
    assert (space / "index.md").is_file() and info.file_count >= 3 and info.size_bytes > 0
    assert registry.names() == ["default", "team-a"]
    shown = info.to_json()
    assert set(shown) == {"name", "root", "fileCount", "lastModified", "sizeBytes"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", shown["lastModified"])
    with pytest.raises(Conflict):
        registry.create("team-a")
    assert registry.open_names() == []  # made, not opened


@pytest.mark.parametrize(
    "name", ["", "Team", "-a", "_a", "a b", "a/b", "a.b", "é", "a" * 64, "default", "\ud800"]
)
def test_bad_names_are_refused(registry: SpaceRegistry, name: str) -> None:
    with pytest.raises(UsageError):
        registry.create(name)


def test_route_names_are_refused_once_reserved(registry: SpaceRegistry) -> None:
    registry.reserve({"search", "file"})
    with pytest.raises(UsageError, match="reserved"):
        registry.create("search")
    registry.create("a" * 63)  # the longest name
    registry.create("9_lives")


def test_a_configured_space_named_like_a_route_stops_the_server(root: Path) -> None:
    (root / ".kiwi" / "config.toml").write_text('[[spaces]]\nname = "tree"\nroot = "t"\n')
    with Knowledge.open(root) as kb:
        registry = SpaceRegistry(kb)
        with pytest.raises(ConfigError, match="'tree'"):
            registry.reserve({"tree", "file"})


def test_roots_outside_dot_spaces_are_refused(registry: SpaceRegistry, tmp_path: Path) -> None:
    for root in (str(tmp_path / "elsewhere"), "../x", ".spaces", "notes", "/etc", "a\x00b"):
        with pytest.raises(UsageError):
            registry.create("x", root)
    info = registry.create("x", ".spaces/nested/x")
    assert info.root.parts[-3:] == (".spaces", "nested", "x")
    with pytest.raises(UsageError, match="already has the root"):
        registry.create("y", ".spaces/nested/x")


def test_runtime_spaces_and_deletions_survive_a_restart(
    registry: SpaceRegistry, default: Knowledge, root: Path
) -> None:
    (root / ".kiwi" / "config.toml").write_text(
        '[[spaces]]\nname = "conf"\nroot = "conf-root"\nvisibility = "public"\n'
    )
    with Knowledge.open(root) as kb:
        first = SpaceRegistry(kb)
        assert first.names() == ["default", "conf"]
        first.create("kept")
        first.create("gone")
        first.delete("gone")
        first.delete("conf")
    with Knowledge.open(root) as kb:
        assert SpaceRegistry(kb).names() == ["default", "kept"]
    state = (root / ".kiwi" / "spaces.json").read_text()
    assert '"kept"' in state and '"conf"' in state
    assert ".kiwi/spaces.json" in (root / ".git" / "info" / "exclude").read_text()


def test_delete_is_soft_and_the_default_space_stays(registry: SpaceRegistry, root: Path) -> None:
    registry.create("old")
    registry.release(registry.acquire("old"))  # open, then its request ends
    (root / ".spaces" / "old" / "mine.md").write_text("keep me\n")
    registry.delete("old")
    kept = list((root / ".spaces").glob("old.deleted-*"))
    assert len(kept) == 1 and re.fullmatch(r"old\.deleted-\d{8}T\d{6}", kept[0].name)
    assert (kept[0] / "mine.md").read_text() == "keep me\n"
    assert not (root / ".spaces" / "old").exists()
    with pytest.raises(UnknownSpace, match="unknown space: old"):
        registry.acquire("old")
    with pytest.raises(UnknownSpace):
        registry.delete("old")
    with pytest.raises(UsageError, match="default space cannot be deleted"):
        registry.delete("default")
    registry.create("old")  # the name is free again
    assert len(list((root / ".spaces").glob("old*"))) == 2


def test_least_recently_used_closes_first_and_held_ones_never(
    registry: SpaceRegistry,
) -> None:
    for name in ("a", "b", "c"):
        registry.create(name)
    a = registry.acquire("a")
    registry.release(registry.acquire("b"))
    c = registry.acquire("c")  # three open, bound 2: b is the one no request holds
    assert registry.open_names() == ["a", "c"]
    registry.release(a)
    registry.release(c)
    b = registry.acquire("b")  # a is now the least recently used
    assert registry.open_names() == ["c", "b"]
    assert b.kb.read("index.md").content
    registry.release(b)


def test_idle_spaces_close_and_reopen(registry: SpaceRegistry, clock: Clock) -> None:
    registry.create("a")
    registry.create("b")
    registry.release(registry.acquire("a"))
    held = registry.acquire("b")
    clock.now += 59
    registry.sweep()
    assert registry.open_names() == ["a", "b"]
    clock.now += 2
    registry.sweep()
    assert registry.open_names() == ["b"]  # held by a request: never closed
    registry.release(held)
    assert registry.open_names() == ["b"]  # just used
    reopened = registry.acquire("a")
    assert reopened.kb.read("index.md").content and registry.open_names() == ["b", "a"]
    registry.release(reopened)


def test_closing_a_space_drops_what_was_attached(registry: SpaceRegistry, clock: Clock) -> None:
    registry.create("a")
    space = registry.acquire("a")
    closed: list[str] = []
    space.cache["rest"] = object()
    space.on_close(lambda: closed.append("app"))
    registry.release(space)
    clock.now += 61
    registry.sweep()
    assert closed == ["app"] and space.cache == {}
    again = registry.acquire("a")
    assert again is not space
    registry.release(again)


def test_concurrent_requests_open_a_space_once(registry: SpaceRegistry) -> None:
    registry.create("a")
    got: list[object] = []

    def request() -> None:
        space = registry.acquire("a")
        got.append(space)
        time.sleep(0.01)
        registry.release(space)

    threads = [threading.Thread(target=request) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len({id(s) for s in got}) == 1


def test_a_thousand_spaces_open_none(root: Path) -> None:
    entries = "".join(f'[[spaces]]\nname = "s{n}"\nroot = "many/s{n}"\n' for n in range(1000))
    (root / ".kiwi" / "config.toml").write_text(entries)
    started = time.monotonic()
    with Knowledge.open(root) as kb:
        registry = SpaceRegistry(kb)
        assert len(registry.names()) == 1001 and registry.open_names() == []
    assert time.monotonic() - started < 5
    assert not (root / "many").exists()
    assert space_root(root, "s7") == root / "many" / "s7"
    with pytest.raises(UnknownSpace):
        space_root(root, "nope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('spaces = "x"', "array of tables"),
        ('[[spaces]]\nname = "a"\n', "needs name and root"),
        ('[[spaces]]\nname = "A"\nroot = "r"\n', "invalid space name"),
        ('[[spaces]]\nname = "default"\nroot = "r"\n', "served root's own space"),
        ('[[spaces]]\nname = "a"\nroot = "r"\nvisibility = "open"\n', "visibility"),
        ('[[spaces]]\nname = "a"\nroot = "r"\n[[spaces]]\nname = "a"\nroot = "s"\n', "twice"),
    ],
)
def test_bad_space_entries_are_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


def test_space_entries_parse_with_private_by_default() -> None:
    config = parse_config('[[spaces]]\nname = "a"\nroot = "/x"\n[server]\nport = 1\n')
    assert [(s.name, s.root, s.visibility) for s in config.spaces] == [("a", "/x", "private")]
    assert config.server.port == 1


def _threads_named(*names: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in names]


BACKGROUND = ("kiwifs-committer", "kiwifs-writeback", "kiwifs-timeline", "kiwifs-check")


@pytest.mark.parametrize("light", [True, False])
def test_spaces_run_light_yet_watched(root: Path, light: bool) -> None:
    """Many spaces fit one process: a space besides the default one makes its commits in the
    server's process, each alone, indexes its writes inside them and runs no dashboard loop;
    its watcher still finds a file written straight to disk. ``light_spaces`` off runs it as
    the default root runs."""
    tuning = Tuning(max_open_spaces=2, space_idle=60.0, light_spaces=light)
    with Knowledge.open(root, tuning=tuning) as default:
        registry = SpaceRegistry(default, dashboard=True)
        try:
            registry.create("a")
            before = set(_threads_named(*BACKGROUND))
            space = registry.acquire("a")
            space.kb.write("notes/one.md", "# one\n\nwritten through the api\n")
            (space.kb.root / "notes" / "two.md").write_text("# two\n\nzebra written by cat\n")
            for _ in range(200):  # the watcher indexes it within milliseconds
                if space.kb.search("zebra").results:
                    break
                time.sleep(0.05)
            assert [r.path for r in space.kb.search("zebra").results] == ["notes/two.md"]
            assert space.kb.versions("notes/one.md")  # committed
            added = set(_threads_named(*BACKGROUND)) - before
            assert (added == set()) is light
            registry.release(space)
        finally:
            registry.close()
