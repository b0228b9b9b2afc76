"""bench/'s corpus generator and naive report, for the tests.

bench/ is not a package and its scripts have generic names (``index``, ``web``), so it is not
put on ``sys.path``: each module is loaded from its file, under a name of its own.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load(name: str) -> ModuleType:
    """``bench/<name>.py`` as the module ``kiwifs_bench_<name>`` (loaded once)."""
    qualified = "kiwifs_bench_" + name
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


corpus = load("corpus")
naive_report = load("naive_report")
