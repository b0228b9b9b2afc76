"""bench/recall.py: evidence normalisation, the metrics, and a smoke run on a tiny conversation.

The bench's figures decide whether a search change helped, so its scoring must be right on cases
small enough to check by hand. The conversation here is written by the test (no shared data);
the smoke run goes through the library with the modes that need no embedder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchload import load

recall = load("recall")

KNOWN = frozenset({"D1:1", "D1:2", "D2:1", "D11:26", "D30:5"})


@pytest.mark.parametrize(
    ("raw", "expected", "dropped"),
    [
        (["D1:1"], ("D1:1",), 0),
        (["D1:1; D2:1"], ("D1:1", "D2:1"), 0),
        (["D:11:26"], ("D11:26",), 0),
        (["D30:05"], ("D30:5",), 0),
        (["D", "D9:9", "D1:2"], ("D1:2",), 2),
        (["D1:1", "D01:01"], ("D1:1",), 0),
        ([], (), 0),
    ],
)
def test_evidence_is_split_normalised_and_checked(
    raw: list[str], expected: tuple[str, ...], dropped: int
) -> None:
    assert recall.normalise_evidence(raw, KNOWN) == (expected, dropped)


def turns(*ids: str) -> frozenset[str]:
    return frozenset(ids)


def test_recall_at_k_counts_evidence_turns_among_the_first_k() -> None:
    ranked = [turns("a"), turns("b"), turns("c"), turns("d"), turns("e"), turns("f")]
    assert recall.recall_at(ranked, ["b", "f"], 5) == 0.5
    assert recall.recall_at(ranked, ["b", "f"], 10) == 1.0
    assert recall.recall_at([], ["b"], 5) == 0.0


def test_a_session_hit_counts_for_every_evidence_turn_it_holds() -> None:
    ranked = [turns("x"), turns("a", "b", "c")]
    assert recall.recall_at(ranked, ["a", "c", "z"], 5) == pytest.approx(2 / 3)
    assert recall.reciprocal_rank(ranked, ["c"]) == 0.5


def test_reciprocal_rank_is_of_the_first_evidence_hit() -> None:
    ranked = [turns("a"), turns("b"), turns("c")]
    assert recall.reciprocal_rank(ranked, ["c", "b"]) == 0.5
    assert recall.reciprocal_rank(ranked, ["z"]) == 0.0


def test_a_failed_call_scores_zero_and_counts() -> None:
    q = recall.Question("who?", 1, ("a",))
    tally = recall.Tally()
    tally.record(q, [turns("a")], 1.0, pack=True)
    tally.failed += 1
    tally.record(q, None, 3.0, pack=True)
    tally.record(recall.Question("no evidence", 3, ()), [], 2.0, pack=True)
    out = tally.summary()
    assert out["R@5"] == 0.5 and out["pack"] == 0.5 and out["MRR"] == 0.5
    assert (out["questions"], out["scored"], out["failed"], out["empty"]) == (3, 2, 1, 1)
    assert out["p50_ms"] == 2.0


def tiny_locomo() -> list[dict[str, Any]]:
    """Two sessions, six turns, one image; questions of every kind the parser meets."""
    conversation = {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:00 pm on 2 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound named Pickle."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! I started pottery classes."},
            {
                "speaker": "Ana",
                "dia_id": "D1:3",
                "text": "Look at this.",
                "blip_caption": "a photo of a lighthouse at dusk",
            },
        ],
        "session_2_date_time": "9:30 am on 20 June, 2023",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "My pottery vase won a ribbon."},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "Pickle learned to fetch oranges."},
            {"speaker": "Ben", "dia_id": "D2:3", "text": "Oranges? Funny dog."},
        ],
    }
    qa = [
        {"question": "greyhound Pickle", "answer": "Ana", "evidence": ["D1:1"], "category": 1},
        {"question": "pottery", "answer": "x", "evidence": ["D1:2; D2:01"], "category": 4},
        {"question": "lighthouse", "answer": "x", "evidence": ["D:1:3", "D9:9"], "category": 2},
        {"question": "Is Ben a sailor?", "answer": "no", "evidence": [], "category": 3},
        {"question": "What is Pickle's job?", "adversarial_answer": "x", "category": 5},
    ]
    return [{"sample_id": "tiny-1", "conversation": conversation, "qa": qa}]


def test_the_conversation_becomes_episodes_and_questions(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps(tiny_locomo()))
    (conv,) = recall.load_data(data, None)
    assert [q.evidence for q in conv.questions] == [
        ("D1:1",),
        ("D1:2", "D2:1"),
        ("D1:3",),
        (),
    ]  # category 5 left out
    assert conv.dropped_evidence == 1
    by_turn = recall.documents(conv, "turn")
    assert len(by_turn) == 6
    picture = by_turn[2]
    assert picture.path == "episodes/tiny-1/session-01/D1-3.md"
    assert picture.body == "Ana: Look at this. [image: a photo of a lighthouse at dusk]"
    text = picture.markdown()
    assert 'memory_kind: "episodic"' in text and 'episode_id: "tiny-1-D1-3"' in text
    assert 'date: "1:00 pm on 2 May, 2023"' in text and "session: 1" in text
    by_session = recall.documents(conv, "session")
    assert [d.turns for d in by_session] == [
        turns("D1:1", "D1:2", "D1:3"),
        turns("D2:1", "D2:2", "D2:3"),
    ]


def test_bm25_baseline_ranks_the_turn_that_shares_the_words(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps(tiny_locomo()))
    (conv,) = recall.load_data(data, None)
    baseline = recall.Bm25Baseline(recall.documents(conv, "turn"))
    assert baseline.ask("Did Pickle fetch oranges?")[0].endswith("D2-2.md")
    assert baseline.ask("zebra") == []
    assert recall.tokens("Ana's vase, 2023!") == ["ana", "s", "vase", "2023"]


def test_a_smoke_run_through_the_library(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps(tiny_locomo()))
    out = tmp_path / "figures.json"
    report = recall.main(
        [
            "--data",
            str(data),
            "--modes",
            "keyword,brief,bm25,semantic",
            "--no-vectors",
            "--work",
            str(tmp_path / "work"),
            "--json",
            str(out),
        ]
    )
    assert json.loads(out.read_text()) == report
    assert report["questions"] == 4 and report["unscored"] == 1
    assert report["note"] == "semantic and hybrid skipped: --no-vectors"
    assert len(report["data_sha256"]) == 64
    for level in ("turn", "session"):
        rows = report["levels"][level]
        assert list(rows) == ["keyword", "brief", "bm25"]
        for row in rows.values():
            assert row["questions"] == 4 and row["scored"] == 3 and row["failed"] == 0
        assert 0.0 <= rows["brief"]["pack"] <= 1.0
    # Turn level, each question's words are in its evidence turns alone. (With two sessions a
    # word in one of them has a BM25 idf of 0, so the session-level baseline finds nothing.)
    assert report["levels"]["turn"]["bm25"]["R@5"] == 1.0
    assert not any((tmp_path / "work").iterdir())  # the roots are thrown away
