"""Shared fixtures: git isolated from the user's configuration, and roots made of real files.

``root`` and ``kb`` are a fresh versioned root from the blank template and the library opened on
it; a module whose tests need another layout defines its own ``root`` (pytest takes the nearest).

Keep this file small and generic; helpers that only one test module needs live in that module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from kiwifs.knowledge import Knowledge

# In CI the property tests draw the same examples every run (a red build is then reproducible,
# never a coin toss); locally they explore new ones each time.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "kiwifs tests",
    "GIT_AUTHOR_EMAIL": "tests@kiwifs.invalid",
    "GIT_COMMITTER_NAME": "kiwifs tests",
    "GIT_COMMITTER_EMAIL": "tests@kiwifs.invalid",
}

Files = Mapping[str, str | bytes]


def pytest_configure(config: pytest.Config) -> None:
    """Compile kiwifs's byte-code once, before any test (in the xdist controller, or the only
    process), so that the ~100 ``kiwifs`` and ``python -c`` processes the tests start load it
    instead of compiling every module again.

    Without this, where ``PYTHONDONTWRITEBYTECODE`` is set (containers, some CI images) no
    process ever writes the cache and each one compiles kiwifs from source: about 0.1 CPU-s for a
    CLI command and 0.3 for ``kiwifs serve``, on every start.
    """
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller compiled it already
    import compileall

    import kiwifs

    compileall.compile_dir(Path(kiwifs.__file__).parent, quiet=1, workers=1)
    _rewrite_test_modules_once(config)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """What ``-n auto`` means here: one worker more than the CPUs this process may use.

    Many tests spend part of their time waiting for another process (a real server starting, a
    killed one restarting, Chromium, a git or ``kiwifs`` command); with one worker per CPU such
    a wait left its core idle. On the 2-core machine the suite took 90 s with 2 workers, 74–80 s
    with 3 and 80 s with 4 (docs/benchmarks.md).
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return cpus + 1


def _rewrite_test_modules_once(config: pytest.Config) -> None:
    """Write pytest's assert-rewritten byte-code of every test module once, before the xdist
    workers start, so that each worker loads it instead of rewriting all ~60 modules itself
    (about 2.4 CPU-s a worker: every worker collects every module).

    pytest reads such a cache even where ``PYTHONDONTWRITEBYTECODE`` keeps it from writing one,
    and checks it against the source's hash, so a stale entry is never used. This leans on
    pytest's own rewriting functions; should they move, the workers rewrite as they always did.
    """
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return
    state = config.stash.get(rewrite.assertstate_key, None)
    needed = ("PYC_TAIL", "_read_pyc", "_rewrite_test", "_write_pyc", "get_cache_dir")
    if state is None or state.mode != "rewrite" or not all(hasattr(rewrite, n) for n in needed):
        return  # --assert=plain, or pytest's internals changed
    for source in sorted(Path(__file__).parent.glob("test_*.py")):
        cache = rewrite.get_cache_dir(source)
        pyc = cache / (source.name[: -len(".py")] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(source, pyc) is not None:
            continue
        try:
            cache.mkdir(exist_ok=True)
        except OSError:
            return  # a read-only checkout: nothing to share
        try:
            source_hash, code = rewrite._rewrite_test(source, config)
            rewrite._write_pyc(state, code, source_hash, pyc)
        except (TypeError, ValueError):  # their signatures changed: leave it to the workers
            return


# The files that take 2.5 s or more on the 2-core machine (docs/benchmarks.md), longest first.
# xdist hands out whole files in the order collected; started last, one of these ran alone at
# the end while the other worker sat idle. A file missing here only runs later.
SLOWEST_FILES = (
    # first, in a fresh worker: on Python 3.11.7 its hypothesis draws failed twice in 2 full runs
    # with "AST constructor recursion depth mismatch" (CPython gh-106905, ast.parse while another
    # thread of the process builds an AST) when it ran after other slow files
    "test_fuzz.py",
    "test_web_browser.py",
    "test_crash.py",
    "test_mcp.py",
    "test_rest.py",
    "test_web_check.py",
    "test_recall_interfaces.py",
    "test_termcolumns.py",
    "test_group_commit.py",
    "test_scan.py",
    "test_index_memory.py",
    "test_pipeline.py",
    "test_hostile_root.py",
    "test_properties.py",
    "test_worker.py",
    "test_startup.py",
    "test_rest_queue.py",
    "test_cli.py",
    "test_web_search.py",
    "test_coverage_rule.py",
    "test_vectors.py",
    "test_forking.py",
    "test_index.py",
    "test_printed_json.py",
    "test_overview.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the slowest files first, then the rest by their number of tests, most first (what
    xdist's own reordering, turned off in pyproject.toml, did for all files): a short file is
    what each worker ends on. Tests within a file keep their order."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item.path.name] = counts.get(item.path.name, 0) + 1

    def weight(item: pytest.Item) -> tuple[int, int]:
        name = item.path.name
        rank = SLOWEST_FILES.index(name) if name in SLOWEST_FILES else len(SLOWEST_FILES)
        return rank, -counts[name]

    items.sort(key=weight)


@pytest.fixture(autouse=True, scope="session")
def isolated_git(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point git (and every ``kiwifs`` subprocess) at an empty global config for the session."""
    config = tmp_path_factory.mktemp("git-home") / "gitconfig"
    config.write_text("")
    patch = pytest.MonkeyPatch()
    patch.setenv("GIT_CONFIG_GLOBAL", str(config))
    for name, value in GIT_ENV.items():
        patch.setenv(name, value)
    yield config
    patch.undo()


def write_files(root: Path, files: Files) -> Path:
    """Write ``{relpath: text or bytes}`` under ``root`` (parents created) and return ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_bytes(content.encode("utf-8"))
    return root


@pytest.fixture
def fresh_records() -> Iterator[None]:
    """The commits this process noted (``madecommits``) forgotten before and after a test."""
    from kiwifs import madecommits

    madecommits.forget()
    yield
    madecommits.forget()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A versioned root laid out by the blank template, as ``kiwifs init --template blank``."""
    from kiwifs.knowledge import Knowledge

    path = tmp_path / "kb"
    Knowledge.init(path, "blank")
    return path


@pytest.fixture
def kb(root: Path) -> Iterator[Knowledge]:
    """The library opened on ``root``, closed after the test."""
    from kiwifs.knowledge import Knowledge

    with Knowledge.open(root) as opened:
        yield opened


@pytest.fixture
def make_root(tmp_path: Path) -> Callable[..., Path]:
    """A factory: ``make_root({relpath: text})`` writes the files into a fresh folder.

    Each call makes a new folder under ``tmp_path`` (``root``, ``root-1``, …) unless ``name`` is
    given. Text is written as UTF-8 bytes exactly (no newline translation).
    """
    made: list[Path] = []

    def make(files: Files | None = None, name: str | None = None) -> Path:
        folder = tmp_path / (name or ("root" if not made else f"root-{len(made)}"))
        made.append(folder)
        return write_files(folder, files or {})

    return make


FORK_COUNTER = """
import os
forks = []  # the pids this process forked
_real_fork = os.fork
def _counting_fork():
    pid = _real_fork()
    if pid:
        forks.append(pid)
    return pid
os.fork = _counting_fork
"""


@pytest.fixture
def run_counting_forks() -> Callable[..., Any]:
    """Run a script in a fresh interpreter, with ``forks`` listing the children it forked.

    Fresh, because the walk forks only in a single-threaded process and the test process may
    have threads. Returns what the script prints, parsed as JSON.
    """

    def run(script: str, *args: str) -> Any:
        command = [sys.executable, "-c", FORK_COUNTER + script, *args]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    return run
