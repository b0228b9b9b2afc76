"""The ``kiwifs`` command: the installed command run as a subprocess where the process is the
point (the entry point, exit codes seen by a shell, the bytes printed, the working directory),
and click's ``CliRunner`` in process for option parsing and usage errors, which a process adds
nothing to but its ~0.25 CPU-s of imports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitrepo import git_line
from kiwifs.base.text import SHOWN_JSON
from kiwifs.cli import cli
from kiwifs.errors import InvalidPath
from kiwifs.frontmatter.reader import read_frontmatter
from kiwifs.knowledge import Knowledge

EXAMPLE = "episodes/example-episode.md"
MISSING_ID = (
    "missing episode_id in {} \u2014 set memory_kind: episodic and episode_id, "
    "or match merged-from by path"
)


def _kiwifs_command() -> str | None:
    return shutil.which("kiwifs", path=str(Path(sys.executable).parent)) or shutil.which("kiwifs")


KIWIFS = _kiwifs_command()


def kiwifs(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    if KIWIFS is None:
        pytest.fail("the kiwifs command is not installed next to this Python (pip install -e .)")
    return subprocess.run(
        [KIWIFS, *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )


def in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``kiwifs ARGS`` run by click's test runner, answered in the shape ``kiwifs()`` answers."""
    result = CliRunner().invoke(cli, list(args), prog_name="kiwifs", env={"NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a crash, not an exit code: fail with its traceback
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def fm(*lines: str) -> str:
    return "---\n" + "".join(line + "\n" for line in lines) + "---\n# page\n"


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def fresh(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A root made by ``kiwifs init`` (default template), never modified by the tests."""
    root = tmp_path_factory.mktemp("cli") / "kb"
    return root, kiwifs("init", "--root", str(root))


@pytest.fixture(scope="module")
def queue_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A read-only root with five episodes, two of them merged, one without an id."""
    root = tmp_path_factory.mktemp("cli") / "queue"
    return write(
        root,
        {
            **{f"episodes/e{i}.md": fm(f"episode_id: e{i}") for i in range(4)},
            "episodes/e4.md": "# no frontmatter\n",
            "concepts/p.md": fm(
                "memory_kind: semantic",
                "merged-from:",
                "  - {type: episode, id: e1}",
                "  - {type: run, id: e3}",
            ),
        },
    )


# ---------------------------------------------------------------------------------------------
# version and init


def test_version() -> None:
    out = kiwifs("version")
    assert out.returncode == 0
    assert out.stdout.startswith("kiwifs ")
    assert out.stdout.split()[1][0].isdigit()


def test_python_dash_m_is_the_same_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kiwifs", "version"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == kiwifs("version").stdout


def test_init_knowledge_template(fresh: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    root, out = fresh
    assert out.returncode == 0, out.stderr
    assert f"Initialized knowledge at {root} (template: knowledge)" in out.stdout
    for rel in ("SCHEMA.md", "index.md", "log.md", EXAMPLE, ".kiwi/config.toml", ".gitignore"):
        assert (root / rel).is_file(), rel
    for folder in ("concepts", "entities", "reports", "episodes"):
        assert (root / folder).is_dir(), folder
    example = read_frontmatter((root / EXAMPLE).read_bytes()).data
    assert (example["memory_kind"], example["episode_id"]) == ("episodic", "example-001")
    config = (root / ".kiwi/config.toml").read_text()
    assert "[memory]" in config
    assert {".kiwi/state/", ".kiwi/server.lock"} <= set(
        (root / ".gitignore").read_text().splitlines()
    )
    schema = (root / "SCHEMA.md").read_text()
    assert "episodes/" in schema and "merged-from" in schema
    assert git_line(root, "rev-list", "--count", "HEAD") == "1"
    assert git_line(root, "status", "--porcelain") == ""
    tracked = git_line(root, "ls-files").splitlines()
    assert EXAMPLE in tracked and ".kiwi/config.toml" in tracked


def test_fresh_root_reports_one_unmerged_example(
    fresh: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, _ = fresh
    out = kiwifs("memory", "report", "--root", str(root))
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "episodic files:          1\n"
        "merged-from references:  0\n"
        "unmerged (no merged-from): 1\n"
        f"  - {EXAMPLE}  (episode_id=example-001)\n"
    )
    assert out.stderr == ""


def test_init_never_overwrites(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    Knowledge.init(root)  # the first run through the library: each kiwifs process costs ~1 s
    (root / "index.md").write_text("# mine\n")
    (root / "log.md").unlink()
    (root / ".gitignore").write_text("node_modules/\n")
    again = kiwifs("init", "-r", str(root))
    assert again.returncode == 0, again.stderr
    assert (root / "index.md").read_text() == "# mine\n"
    assert (root / "log.md").is_file()
    assert (root / ".gitignore").read_text() == (
        "node_modules/\n.kiwi/state/\n.kiwi/server.lock\n.kiwi-write-*\n.kiwi/keys.json\n"
    )


def test_init_never_writes_through_a_link_into_git(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    (root / ".git" / "hooks").mkdir(parents=True)
    os.symlink(".git/hooks/post-commit", root / "index.md")  # dangling: would become a hook
    os.symlink(".git", root / "concepts")
    with pytest.raises(InvalidPath, match="hidden path"):
        Knowledge.init(root)
    assert sorted(p.name for p in (root / ".git").rglob("*")) == ["hooks"]


def test_init_blank_template(tmp_path: Path) -> None:
    root = tmp_path / "blank"
    out = kiwifs("init", "--root", str(root), "--template", "blank")
    assert out.returncode == 0, out.stderr
    assert "(template: blank)" in out.stdout
    assert (root / "index.md").is_file()
    assert (root / ".kiwi/config.toml").is_file()
    assert not (root / "episodes").exists()
    assert git_line(root, "rev-list", "--count", "HEAD") == "1"


def test_templates_are_packaged() -> None:
    """Reference TestKnowledgeTemplateEmbedded, against the installed package data."""
    base = resources.files("kiwifs") / "templates" / "knowledge"
    for rel in ("SCHEMA.md", "index.md", "log.md", "episodes/example-episode.md"):
        assert (base / rel).is_file(), rel


# ---------------------------------------------------------------------------------------------
# memory report


def test_report_text_and_warnings_on_stderr(queue_root: Path) -> None:
    out = kiwifs("memory", "report", "-r", str(queue_root))
    assert out.returncode == 0
    assert out.stdout == (
        "episodic files:          5\n"
        "merged-from references:  2\n"
        "unmerged (no merged-from): 3\n"
        "  - episodes/e0.md  (episode_id=e0)\n"
        "  - episodes/e2.md  (episode_id=e2)\n"
        "  - episodes/e4.md  (set episode_id)\n"
    )
    assert out.stderr == f"warning: {MISSING_ID.format('episodes/e4.md')}\n"


def test_report_json(queue_root: Path) -> None:
    out = kiwifs("memory", "report", "--json", "--root", str(queue_root))
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert out.stdout == json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    assert list(data) == [
        "episodic_count",
        "merged_from_refs",
        "episodic_files",
        "unmerged",
        "warnings",
        "unmerged_count",
        "episodes_prefix",
        "superseded_count",
        "claimed_count",
    ]
    assert [e["path"] for e in data["unmerged"]] == [
        "episodes/e0.md",
        "episodes/e2.md",
        "episodes/e4.md",
    ]
    assert data["warnings"] == [MISSING_ID.format("episodes/e4.md")]
    assert (data["episodic_count"], data["merged_from_refs"], data["unmerged_count"]) == (5, 2, 3)
    assert out.stderr == ""


def test_text_output_never_sends_control_sequences_to_the_terminal(tmp_path: Path) -> None:
    """An ``episode_id`` (or a page's text) holding OSC/CSI sequences is printed as visible
    escapes, on stdout and in the warnings on stderr; JSON keeps the value itself."""
    root = tmp_path / "kb"
    Knowledge.init(root, template="blank")
    hostile = '"\\e]0;pwned\\a\\e[2J\\x9b31m\\u202eevil"'  # YAML escapes: ESC, BEL, CSI, RLO
    for name in ("a", "b"):  # the same id twice: a warning that names it, on stderr
        (root / "episodes").mkdir(exist_ok=True)
        (root / f"episodes/{name}.md").write_text(
            f"---\nepisode_id: {hostile}\n---\nretry \x1b[8mhidden\x1b[0m storm\n"
        )
    shown = "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202eevil"
    out = in_process("memory", "report", "--root", str(root))
    assert f"(episode_id={shown})" in out.stdout
    assert shown in out.stderr
    for text in (out.stdout, out.stderr):
        assert not any(c in text for c in "\x1b\x07\x9b\u202e")
    brief = in_process("brief", "storm", "--root", str(root))
    assert "retry \\x1b[8mhidden\\x1b[0m storm" in brief.stdout and "\x1b" not in brief.stdout
    # on a terminal the highlight is the one escape sequence printed: the page's own are shown
    styled = CliRunner().invoke(cli, ["search", "storm", "--root", str(root)], color=True)
    assert "\\x1b[8mhidden\\x1b[0m" in styled.stdout, styled.stdout
    assert "\x1b[1mstorm\x1b[0m" in styled.stdout  # the highlight, in bold
    assert styled.stdout.count("\x1b") == 2 * styled.stdout.count("\x1b[1m")  # bold on, off
    data = json.loads(in_process("memory", "report", "--json", "--root", str(root)).stdout)
    assert data["unmerged"][0]["episode_id"] == "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil"


def test_json_output_is_json_dumps_byte_for_byte(tmp_path: Path) -> None:
    """``--json`` prints ``json.dumps(value, indent=2, ensure_ascii=False)``: non-ASCII text, a
    file name that is not UTF-8 (by the name rule: its byte as ``\\xff``, whatever stdout's
    error handler) and search scores small enough for an exponent, from the index and from the
    scan."""
    root = write(
        tmp_path,
        {
            "episodes/\u00e9t\u00e9.md": fm('episode_id: "\u65e5\u672c \\u2028 q\\"uote \\t"'),
            "episodes/b.md": fm("episode_id: \U0001f600", "memory_kind: Episodic") + "fox",
            "notes/m.md": fm("merged-from: [{type: run, id: x}]") + "fox",
            **{f"notes/n{i}.md": fm(f"title: n{i}") + "the fox" for i in range(12)},
        },
    )
    os.close(os.open(os.fsencode(root / "episodes") + b"/\xff.md", os.O_CREAT | os.O_WRONLY))
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:surrogateescape"}

    def printed(*args: str) -> bytes:
        argv = [str(KIWIFS), *args, "--json", "--root", str(root)]
        return subprocess.run(argv, capture_output=True, env=env, check=True).stdout

    def standard(value: object) -> bytes:
        text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
        return text.encode("utf-8", SHOWN_JSON)

    assert b'"episodes/\\\\xff.md"' in printed("memory", "report", "--no-index")
    with Knowledge.open(root) as kb:
        kb.reindex()
        report = standard(kb.memory_report().to_json())
        search = kb.search("fox")
    assert any(0 < hit.score < 1e-4 for hit in search.results)
    assert printed("memory", "report") == report
    assert printed("memory", "report", "--no-index") == report
    assert printed("search", "fox") == standard(search.to_json())


def test_report_paging(queue_root: Path) -> None:
    out = in_process(
        "memory", "report", "-j", "-r", str(queue_root), "--limit", "2", "--offset", "1"
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [e["path"] for e in data["episodic_files"]] == ["episodes/e1.md", "episodes/e2.md"]
    assert [e["path"] for e in data["unmerged"]] == ["episodes/e2.md", "episodes/e4.md"]
    assert (data["episodic_count"], data["unmerged_count"]) == (5, 3)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--limit", "-1"], "limit"),
        (["--offset", "-2"], "offset"),
    ],
    ids=["negative-limit", "negative-offset"],
)
def test_report_bad_paging_is_a_usage_error(
    queue_root: Path, args: list[str], problem: str
) -> None:
    out = in_process("memory", "report", "-r", str(queue_root), *args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert problem in out.stderr


@pytest.mark.parametrize(
    ("args", "prefix", "episodic"),
    [
        ([], "notes/", ["notes/n.md"]),
        (["--episodes-prefix", "./raw"], "raw/", ["raw/r.md"]),
    ],
    ids=["config", "flag-beats-config"],
)
def test_report_prefix_precedence(
    tmp_path: Path, args: list[str], prefix: str, episodic: list[str]
) -> None:
    root = write(
        tmp_path / "kb",
        {
            "raw/r.md": "# r\n",
            "notes/n.md": "# n\n",
            "episodes/e.md": "# e\n",
            ".kiwi/config.toml": '[memory]\nepisodes_path_prefix = "notes"\n',
        },
    )
    out = in_process("memory", "report", "-j", "-r", str(root), *args)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["episodes_prefix"] == prefix
    assert [e["path"] for e in data["episodic_files"]] == episodic


@pytest.mark.parametrize(
    "command",
    [["memory", "report"], ["memory", "merge", "p.md", "--episode", "e1"]],
    ids=["report", "merge"],
)
def test_missing_root_is_exit_2_and_not_created(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "typo" / "kb"
    out = in_process(*command, "--root", str(missing))
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert str(missing) in out.stderr
    assert not (tmp_path / "typo").exists()


def test_default_root_is_dot_knowledge(tmp_path: Path) -> None:
    write(tmp_path / "knowledge", {"episodes/a.md": fm("episode_id: a1")})
    out = kiwifs("memory", "report", "-j", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["episodic_count"] == 1


# ---------------------------------------------------------------------------------------------
# memory merge (and --fail-on-unmerged, which is what CI gates on)


def test_merge_flow_and_fail_on_unmerged(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    Knowledge.init(root)
    gate = kiwifs("memory", "report", "-r", str(root), "--fail-on-unmerged")
    assert gate.returncode == 1
    assert "unmerged (no merged-from): 1" in gate.stdout

    merged = kiwifs(
        "memory", "merge", "concepts/summary.md", "-r", str(root),
        "--episode", "example-001", "--episode", "e2",
        "--path", "./episodes/x.md", "--path", "episodes//y.md",
        "--type", "run", "--note", "batch 1", "--actor", "consolidator",
    )  # fmt: skip
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout == "merged 4 entries into concepts/summary.md\n"
    data = read_frontmatter((root / "concepts/summary.md").read_bytes()).data
    assert data["memory_kind"] == "semantic"
    entries = data["merged-from"]
    assert [(e["type"], e.get("id"), e.get("path")) for e in entries] == [
        ("run", "example-001", None),
        ("run", "e2", None),
        ("run", None, "episodes/x.md"),
        ("run", None, "episodes/y.md"),
    ]
    assert {e["note"] for e in entries} == {"batch 1"}
    assert {e["actor"] for e in entries} == {"consolidator"}
    assert git_line(root, "log", "-1", "--format=%an") == "consolidator"
    head = git_line(root, "rev-parse", "HEAD")

    again = kiwifs(
        "memory", "merge", "concepts/summary.md", "-r", str(root), "-j",
        "--episode", "example-001", "--type", "RUN", "--actor", "someone-else",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["added"] == []
    assert json.loads(again.stdout)["created"] is False
    assert git_line(root, "rev-parse", "HEAD") == head

    gate = kiwifs("memory", "report", "-r", str(root), "--fail-on-unmerged")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "all episodic files are referenced by at least one merged-from list" in gate.stdout


def test_merge_default_type_is_episode(tmp_path: Path) -> None:
    root = write(tmp_path / "kb", {"episodes/a.md": fm("episode_id: a1")})
    out = in_process("memory", "merge", "p.md", "-r", str(root), "--episode", "a1")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "merged 1 entry into p.md\n"
    (entry,) = read_frontmatter((root / "p.md").read_bytes()).data["merged-from"]
    assert (entry["type"], entry["id"], entry["actor"]) == ("episode", "a1", "kiwifs")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ([], 2),
        (["--path", "../outside.md"], 2),
    ],
    ids=["no-entries", "dotdot-path"],
)
def test_merge_usage_errors(tmp_path: Path, args: list[str], code: int) -> None:
    root = write(tmp_path / "kb", {"p.md": "---\ntitle: t\n---\nbody\n"})
    out = in_process("memory", "merge", "p.md", "-r", str(root), *args)
    assert out.returncode == code
    assert (root / "p.md").read_text() == "---\ntitle: t\n---\nbody\n"
    assert out.stderr.strip()


def test_merge_into_broken_frontmatter_fails_and_leaves_the_file(tmp_path: Path) -> None:
    content = b"---\ntitle: [broken\n---\r\nbody\r\n"
    root = tmp_path / "kb"
    root.mkdir()
    (root / "p.md").write_bytes(content)
    out = kiwifs("memory", "merge", "p.md", "-r", str(root), "--episode", "e1")
    assert out.returncode != 0
    assert out.stderr.startswith("error: ")
    assert len(out.stderr.strip().splitlines()) == 1
    assert (root / "p.md").read_bytes() == content


def test_the_reindex_bar_starts_no_thread_so_the_rebuild_can_fork() -> None:
    import threading

    from kiwifs.cli.root import _advance, progress_bar

    before = threading.active_count()
    with progress_bar() as bar:
        task = bar.add_task("indexing", total=None, rate="")
        _advance(bar, task, 10, 20, "files")
        assert threading.active_count() == before  # no refresh thread: fork_is_safe holds
        assert bar.tasks[0].completed == 10
