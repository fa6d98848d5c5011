"""LexicalOverlapRouter: signal = agg over top hits of |M(q) ∩ M(h)| / |M(q)|."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_car._errors import ConfigurationError
from llama_index_car.retrievers.routing import LexicalOverlapRouter


class SpaceMorphemes:
    """Content morphemes = whitespace tokens (an independent, predictable stand-in)."""

    def __init__(self) -> None:
        self.calls = 0

    def content_morphemes(self, text: str) -> list[str]:
        self.calls += 1
        return text.split()


def hits(*texts: str) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(id_=f"h{i}", text=t), score=1.0) for i, t in enumerate(texts)]


def test_signal_max_over_top_hits() -> None:
    router = LexicalOverlapRouter(tokenizer=SpaceMorphemes(), top_n=2)
    # query {a b c d}; hit0 shares {a}, hit1 shares {a b c}, hit2 (beyond top_n) shares all
    s = router.signal("a b c d", hits("a x", "a b c y", "a b c d"))
    assert s == pytest.approx(3 / 4)


def test_signal_mean() -> None:
    router = LexicalOverlapRouter(tokenizer=SpaceMorphemes(), top_n=3, aggregate="mean")
    s = router.signal("a b c d", hits("a x", "a b c y", "z"))
    assert s == pytest.approx((1 / 4 + 3 / 4 + 0 / 4) / 3)


def test_repeated_query_morphemes_count_once() -> None:
    router = LexicalOverlapRouter(tokenizer=SpaceMorphemes(), top_n=1)
    assert router.signal("a a b", hits("a")) == pytest.approx(1 / 2)


def test_decision_threshold_inclusive() -> None:
    router = LexicalOverlapRouter(tokenizer=SpaceMorphemes(), threshold=0.5, top_n=1)
    low = router.decide("a b", hits("a"))  # 0.5 <= 0.5 -> CAR
    high = router.decide("a b", hits("a b"))
    assert low.use_car and low.signal == pytest.approx(0.5) and low.threshold == 0.5
    assert not high.use_car and high.signal == pytest.approx(1.0)


def test_edge_cases() -> None:
    router = LexicalOverlapRouter(tokenizer=SpaceMorphemes())
    assert router.signal("", hits("a")) == 1.0  # nothing to bridge: hybrid
    assert router.signal("a b", []) == 0.0  # no lexical hit at all: lowest overlap
    assert router.decide("a b", []).use_car


def test_hit_analysis_is_cached() -> None:
    tok = SpaceMorphemes()
    router = LexicalOverlapRouter(tokenizer=tok, top_n=2)
    h = hits("a b", "c d")
    router.signal("a", h)
    calls = tok.calls
    router.signal("c", h)
    assert tok.calls == calls + 1  # only the new query is analysed


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": "x"}, "threshold"),
        ({"top_n": 0}, "top_n"),
        ({"aggregate": "median"}, "aggregate"),
        ({"tokenizer": object()}, "content_morphemes"),
    ],
)
def test_configuration_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        LexicalOverlapRouter(**kwargs)  # type: ignore[arg-type]


def test_with_kiwi_content_morphemes() -> None:
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    tok = KiwiTokenizer()
    router = LexicalOverlapRouter(tokenizer=tok, top_n=1)
    query = "배수시설 설치기준은 무엇인가"
    hit_text = "배수시설의 설치 간격"
    q = set(tok.content_morphemes(query))
    expected = len(q & set(tok.content_morphemes(hit_text))) / len(q)
    assert 0 < expected < 1
    assert router.signal(query, hits(hit_text)) == pytest.approx(expected)
