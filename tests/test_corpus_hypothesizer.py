"""CorpusCriterionHypothesizer: vocabulary mining, formula checks, persistence, no mutation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import MetadataMode, TextNode

from llama_index_car._errors import ConfigurationError, HypothesisError, IndexPersistError
from llama_index_car.hypothesizers.corpus import (
    CorpusCriterionHypothesizer,
    _analyse_all,
)
from llama_index_car.tokenizers.kiwi import KiwiTokenizer
from tests.fakes.corpus import CRITERION_TEXTS
from tests.fakes.embeddings import VecEmbedding

KEYWORDS = ("배수", "포장", "교량", "조명")


class KeywordEmbedding(VecEmbedding):
    """Vector = counts of four keywords (+ a constant); predictable and offline."""

    def _vec(self, text: str) -> list[float]:
        return [float(text.count(k)) for k in KEYWORDS] + [1.0]


TEXTS = CRITERION_TEXTS


@pytest.fixture(scope="module")
def tokenizer() -> KiwiTokenizer:
    return KiwiTokenizer()


@pytest.fixture(scope="module")
def nodes() -> list[TextNode]:
    return [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(TEXTS)]


@pytest.fixture(scope="module")
def hyp(nodes: list[TextNode], tokenizer: KiwiTokenizer) -> CorpusCriterionHypothesizer:
    return CorpusCriterionHypothesizer.from_nodes(
        nodes, tokenizer=tokenizer, embed_model=KeywordEmbedding(), n_terms=2
    )


def test_vocabulary_holds_criterion_compounds_with_min_df(
    hyp: CorpusCriterionHypothesizer, tokenizer: KiwiTokenizer
) -> None:
    compounds = [set(tokenizer.noun_compounds(t)) for t in TEXTS]
    assert "설치기준" in hyp.terms and "설계기준" in hyp.terms and "조도기준" not in hyp.terms
    # every term ends with a head, occurs in >= 2 nodes, and term_df is its true df
    for term, df in zip(hyp.terms, hyp.term_df, strict=True):
        assert any(term.endswith(h) and len(term) > len(h) for h in hyp.heads)
        assert df == sum(term in c for c in compounds) >= 2
    assert "배수시설" not in hyp.terms  # no criterion head
    assert hyp.n_nodes == len(TEXTS)


def test_centroids_are_mean_of_centred_unit_embeddings(
    hyp: CorpusCriterionHypothesizer, tokenizer: KiwiTokenizer
) -> None:
    emb = np.array([KeywordEmbedding()._vec(t) for t in TEXTS])
    mean = emb.mean(axis=0)
    centred = emb - mean
    centred /= np.linalg.norm(centred, axis=1, keepdims=True)
    members = [i for i, t in enumerate(TEXTS) if "설치기준" in tokenizer.noun_compounds(t)]
    expected = centred[members].mean(axis=0)
    expected /= np.linalg.norm(expected)
    got = hyp.centroids[hyp.terms.index("설치기준")]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hyp.mean_embedding, mean, rtol=1e-6)


def test_cooccurrence_and_idf(hyp: CorpusCriterionHypothesizer, tokenizer: KiwiTokenizer) -> None:
    morph_sets = [set(tokenizer.content_morphemes(t)) for t in TEXTS]
    term_docs = [i for i, t in enumerate(TEXTS) if "설계기준" in tokenizer.noun_compounds(t)]
    t = hyp.terms.index("설계기준")
    for m in ("포장", "따르", "균열"):
        j = hyp.morphemes.index(m)
        expected = sum(m in morph_sets[i] for i in term_docs) / len(term_docs)
        assert hyp.cooccurrence[t, j] == pytest.approx(expected)
        df = sum(m in s for s in morph_sets)
        assert hyp.idf[j] == pytest.approx(math.log(1 + len(TEXTS) / df), rel=1e-6)


def test_score_formula(hyp: CorpusCriterionHypothesizer, tokenizer: KiwiTokenizer) -> None:
    query = "포장 균열은 어떻게 보수하나요"
    q = np.array(KeywordEmbedding()._vec(query)) - hyp.mean_embedding
    emb = hyp.centroids @ (q / np.linalg.norm(q))
    qm = sorted({m for m in tokenizer.content_morphemes(query) if m in hyp.morphemes})
    cols = [hyp.morphemes.index(m) for m in qm]
    w = hyp.idf[cols]
    dense_cooc = hyp.cooccurrence.toarray()[:, cols]
    cooc = dense_cooc @ w / w.sum()

    def z(v: np.ndarray) -> np.ndarray:
        return (v - v.mean()) / v.std()

    expected = 0.6 * z(emb) + 0.4 * z(cooc)
    np.testing.assert_allclose(hyp.score_terms(query), expected, rtol=1e-4, atol=1e-5)


def test_hypothesis_fits_the_query(hyp: CorpusCriterionHypothesizer) -> None:
    h = hyp.hypothesize("포장 균열은 어떻게 보수하나요")
    assert h.criteria[0] == "설계기준"
    assert h.text == " ".join(h.criteria) and len(h.criteria) == 2
    assert h.source == "corpus" and not h.cached
    h2 = hyp.hypothesize("배수 물빠짐 관로는 얼마나 띄워요")
    assert h2.criteria[0] in ("설치기준", "설치간격")


async def test_async_and_empty_query(hyp: CorpusCriterionHypothesizer) -> None:
    h = await hyp.ahypothesize("교량 난간")
    assert h.criteria[0] == hyp.hypothesize("교량 난간").criteria[0]
    with pytest.raises(HypothesisError):
        hyp.hypothesize("   ")


def test_nodes_not_mutated(nodes: list[TextNode], tokenizer: KiwiTokenizer) -> None:
    before = [n.model_dump() for n in nodes]
    CorpusCriterionHypothesizer.from_nodes(nodes, tokenizer=tokenizer, embed_model=KeywordEmbedding())
    assert [n.model_dump() for n in nodes] == before
    assert all(n.embedding is None for n in nodes)


def test_precomputed_embeddings_are_used(nodes: list[TextNode], tokenizer: KiwiTokenizer) -> None:
    class Exploding(KeywordEmbedding):
        def _get_text_embedding(self, text: str) -> list[float]:
            raise AssertionError("must not embed nodes when embeddings are given")

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            raise AssertionError("must not embed nodes when embeddings are given")

    matrix = np.array([KeywordEmbedding()._vec(t) for t in TEXTS])
    a = CorpusCriterionHypothesizer.from_nodes(
        nodes, tokenizer=tokenizer, embed_model=Exploding(), embeddings=matrix
    )
    b = CorpusCriterionHypothesizer.from_nodes(
        nodes, tokenizer=tokenizer, embed_model=Exploding(),
        embeddings={n.node_id: list(v) for n, v in zip(nodes, matrix, strict=True)},
    )
    np.testing.assert_allclose(a.centroids, b.centroids)
    with pytest.raises(ConfigurationError, match="shape"):
        CorpusCriterionHypothesizer.from_nodes(
            nodes, tokenizer=tokenizer, embeddings=matrix[:3]
        )


def test_persist_roundtrip(hyp: CorpusCriterionHypothesizer, tmp_path: Path) -> None:
    hyp.persist(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "centroids.npy", "cooccurrence.npz", "corpus_hypothesizer.json",
    ]
    loaded = CorpusCriterionHypothesizer.from_persist_dir(tmp_path, embed_model=KeywordEmbedding())
    assert loaded.terms == hyp.terms
    for q in ("포장 균열 보수", "교량 난간 높이", "조명"):
        assert loaded.hypothesize(q).criteria == hyp.hypothesize(q).criteria
    (tmp_path / "centroids.npy").unlink()
    with pytest.raises(IndexPersistError, match="centroids.npy|rebuild"):
        CorpusCriterionHypothesizer.from_persist_dir(tmp_path)


def test_single_kiwi_pass_matches_tokenizer_methods(tokenizer: KiwiTokenizer) -> None:
    texts = [*TEXTS, "", "높은 기준을 따른다 ABC 3.5m", "신축이음장치 설치기준(안)을 검토"]
    fast = _analyse_all(tokenizer, texts, None)
    slow = [(tokenizer.noun_compounds(t), tokenizer.content_morphemes(t)) for t in texts]
    assert fast == slow


def test_configuration_errors(nodes: list[TextNode], tokenizer: KiwiTokenizer) -> None:
    emb = KeywordEmbedding()
    with pytest.raises(ConfigurationError, match="empty"):
        CorpusCriterionHypothesizer.from_nodes([], tokenizer=tokenizer, embed_model=emb)
    with pytest.raises(ConfigurationError, match="no criterion term"):
        CorpusCriterionHypothesizer.from_nodes(
            nodes, tokenizer=tokenizer, embed_model=emb, heads=("없는머리말",)
        )
    with pytest.raises(ConfigurationError, match="min_df"):
        CorpusCriterionHypothesizer.from_nodes(nodes, tokenizer=tokenizer, min_df=0)
    with pytest.raises(ConfigurationError, match="n_terms"):
        CorpusCriterionHypothesizer.from_nodes(
            nodes, tokenizer=tokenizer, embed_model=emb, n_terms=0
        )
    with pytest.raises(ConfigurationError, match="noun_compounds"):
        CorpusCriterionHypothesizer.from_nodes(nodes, tokenizer=object())  # type: ignore[arg-type]


def test_embed_text_is_analysed(tokenizer: KiwiTokenizer) -> None:
    # metadata visible to the embedding (title) counts; excluded metadata does not
    nodes = [
        TextNode(id_=f"m{i}", text="본문", metadata={"title": "배수 설치기준", "secret": "포장 설계기준"},
                 excluded_embed_metadata_keys=["secret"])
        for i in range(2)
    ]
    assert "secret" not in nodes[0].get_content(MetadataMode.EMBED)
    hyp = CorpusCriterionHypothesizer.from_nodes(nodes, tokenizer=tokenizer, embed_model=KeywordEmbedding())
    assert hyp.terms == ["설치기준"]
