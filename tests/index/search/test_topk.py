"""Keyword search ranks a window of matches, not every match, and answers exactly as before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kiwifs.knowledge import Knowledge
from kiwifs.tuning import Tuning
from partskit import index_keeper


def test_top_k_search_equals_the_full_ranking(make_root: Callable[..., Path]) -> None:
    """Many ties (identical bodies), prefixes, pages deep into the ranking: the windowed
    top-k path returns what ranking every match returns (``Tuning.search_top_k`` off)."""
    pages = {}
    for i in range(300):
        folder = "a" if i % 3 else "b"
        words = "fox " * (1 + i % 4) + ("river stone " if i % 5 else "meadow ")
        pages[f"{folder}/p{i:03}.md"] = f"---\nn: {i}\n---\n{words}\n"
    root = make_root(pages)
    keeper = index_keeper(root)
    with Knowledge(root, index=keeper) as kb:
        cases = [
            ("fox", 10, 0, None),
            ("fox", 20, 130, None),
            ("fox", 50, 0, "b/"),
            ("fox river", 7, 3, "a/"),
            ("meadow", 200, 0, None),
            ("stone", 5, 150, "a"),
        ]
        index = keeper._open()
        for query, limit, offset, prefix in cases:
            index.tuning = Tuning()
            fast = kb.search(query, limit=limit, offset=offset, path_prefix=prefix).to_json()
            index.tuning = Tuning(search_top_k=False)
            full = kb.search(query, limit=limit, offset=offset, path_prefix=prefix).to_json()
            assert fast["results"], (query, prefix)
            assert fast == full, (query, limit, offset, prefix)
