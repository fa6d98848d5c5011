"""``CorpusCriterionHypothesizer``: an offline criterion hypothesizer mined from the corpus.

No LLM. At build time it mines the corpus's own criterion vocabulary — Kiwi noun compounds
whose last noun is a criterion head (기준, 지침, 규정, 요건, 조건, 한계, 허용치, 간격, 높이, 폭,
두께, 길이, 강도, 기울기, 경사, 범위, 방법 …) — and, for every term ``t`` found in at least
``min_df`` nodes, records

* its *context centroid* ``c_t``: the mean of the mean-centred, L2-normalised embeddings of
  the nodes that contain ``t``, renormalised (one row of a ``T × d`` matrix);
* its *co-occurrence profile*: ``P(m | t) = df(t, m) / df(t)`` for every content morpheme
  ``m`` (a sparse ``T × M`` matrix), and ``idf(m) = ln(1 + N / df(m))``.

At query time (one query embedding + one Kiwi analysis + two matrix–vector products, a few
milliseconds) every term is scored by

.. math::

    s(t) = w \\cdot z\\big(\\cos(q - \\mu, c_t)\\big)
         + (1 - w) \\cdot z\\Big(\\frac{\\sum_{m \\in Q} \\mathrm{idf}(m) P(m \\mid t)}
                                  {\\sum_{m \\in Q} \\mathrm{idf}(m)}\\Big)

where ``μ`` is the corpus mean embedding, ``Q`` the query's content morphemes, ``z`` a
z-score over the terms and ``w = embedding_weight`` (default 0.6). The ``n_terms`` best terms
(default 1: on lhcs_construction every extra offline term lowered MRR; a term contained in an
already chosen one is skipped) become the hypothesis, phrased in corpus vocabulary: ``text = " ".join(terms)``, ``criteria = terms``.

Persist with :meth:`persist` (``corpus_hypothesizer.json`` + ``centroids.npy`` +
``cooccurrence.npz``; no pickle) and reload with :meth:`from_persist_dir`.

>>> hyp = CorpusCriterionHypothesizer.from_nodes(nodes)  # doctest: +SKIP
>>> hyp.hypothesize("비 오는 날 압접 작업은 어떻게 해요?").criteria  # doctest: +SKIP
('압접작업 조건', ...)
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_car._errors import ConfigurationError, HypothesisError, IndexPersistError
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis

__all__ = ["DEFAULT_CRITERION_HEADS", "CorpusCriterionHypothesizer", "MorphemeAnalyzer"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
_JSON_NAME = "corpus_hypothesizer.json"
_CENTROIDS_NAME = "centroids.npy"
_COOC_NAME = "cooccurrence.npz"

#: Head nouns that make a noun compound a criterion term (the issue's list, plus the
#: standard-framing lexicon: 요령, 편람, 규격, 기준서 …).
DEFAULT_CRITERION_HEADS: tuple[str, ...] = (
    "기준", "지침", "규정", "요건", "조건", "한계", "허용치", "허용값", "한도", "간격", "높이",
    "폭", "두께", "길이", "깊이", "강도", "기울기", "경사", "구배", "범위", "방법", "요령",
    "편람", "규격", "기준서", "기준값", "치수", "규모", "용량", "하중", "온도", "시간", "기간",
    "횟수", "빈도", "순서", "절차", "비율", "농도", "등급",
)


@runtime_checkable
class MorphemeAnalyzer(Protocol):
    """What the hypothesizer needs from a tokenizer (``KiwiTokenizer`` satisfies it)."""

    def content_morphemes(self, text: str) -> list[str]: ...

    def noun_compounds(self, text: str) -> list[str]: ...


def _default_tokenizer() -> MorphemeAnalyzer:
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    return KiwiTokenizer()


def _default_embed_model() -> BaseEmbedding:
    from llama_index_car.providers import resolve_embed_model

    return resolve_embed_model()  # $CAR_EMBED_MODEL, else the offline e5


_NOUN_TAGS = frozenset({"NNG", "NNP"})
_CONTENT_TAGS = frozenset({"NNG", "NNP", "NR", "VV", "VA", "XR", "SL", "SN", "SH"})


def _from_kiwi_tokens(tokens: Sequence[Any]) -> tuple[list[str], list[str]]:
    """``(noun_compounds, content_morphemes)`` from one plain Kiwi analysis.

    Same rules as ``KiwiTokenizer.noun_compounds`` / ``content_morphemes`` (a test checks the
    equality), computed from one analysis instead of two.
    """
    compounds: list[str] = []
    morphs: list[str] = []
    run: list[Any] = []
    for t in [*tokens, None]:
        if t is not None:
            base = t.tag.split("-")[0]
            if base in _CONTENT_TAGS:
                morphs.append(t.form)
            if t.tag in _NOUN_TAGS and (not run or run[-1].end == t.start):
                run.append(t)
                continue
        if len(run) >= 2:
            compounds.append("".join(m.form for m in run))
        run = [t] if t is not None and t.tag in _NOUN_TAGS else []
    return compounds, morphs


def _analyse_all(
    tok: MorphemeAnalyzer, texts: Sequence[str], progress: Any
) -> list[tuple[list[str], list[str]]]:
    """Noun compounds and content morphemes of every text (one Kiwi pass for KiwiTokenizer)."""
    kiwi_getter = getattr(tok, "kiwi", None)
    if type(tok).__name__ == "KiwiTokenizer" and callable(kiwi_getter):
        kiwi = kiwi_getter()
        out: list[tuple[list[str], list[str]]] = [([], []) for _ in texts]
        todo = [i for i, t in enumerate(texts) if t.strip()]
        stream = kiwi.tokenize(iter([texts[i] for i in todo]))
        pos = iter(progress) if progress is not None else None
        for i, tokens in zip(todo, stream, strict=False):
            out[i] = _from_kiwi_tokens(tokens)
            if pos is not None:
                next(pos, None)
        return out
    return [(tok.noun_compounds(t), tok.content_morphemes(t)) for t in texts]


def _is_term(compound: str, heads: Sequence[str]) -> bool:
    return any(len(compound) > len(h) and compound.endswith(h) for h in heads)


def _normalise_rows(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


def _zscore(v: np.ndarray) -> np.ndarray:
    sd = float(v.std())
    return (v - float(v.mean())) / sd if sd > 0 else np.zeros_like(v)


class CorpusCriterionHypothesizer(BaseCriterionHypothesizer):
    """Offline criterion hypothesizer over the corpus's own criterion vocabulary.

    Build with :meth:`from_nodes` (or :meth:`from_persist_dir`); see the module docstring for
    the scoring formula. Thread-safe for concurrent ``hypothesize`` calls.

    Args (of the constructor; normally filled by :meth:`from_nodes`):
        terms: the criterion vocabulary (``T`` terms).
        centroids: ``T × d`` float32 matrix of unit-norm context centroids.
        mean_embedding: ``d`` corpus mean embedding (for centring the query).
        morphemes: the content-morpheme vocabulary (``M`` entries).
        idf: ``M`` idf values, ``ln(1 + N / df(m))``.
        cooccurrence: scipy CSR ``T × M`` matrix of ``P(m | t)``.
        term_df: document frequency of each term.
        embed_model: the embedding used for the query (same as for the centroids!).
        tokenizer: gives ``content_morphemes`` of the query.
        n_terms: terms in a hypothesis (default 1).
        embedding_weight: ``w`` in the score, in [0, 1] (default 0.6).
    """

    name = "corpus"

    def __init__(
        self,
        terms: Sequence[str],
        centroids: np.ndarray,
        mean_embedding: np.ndarray,
        morphemes: Sequence[str],
        idf: np.ndarray,
        cooccurrence: Any,
        term_df: Sequence[int],
        embed_model: BaseEmbedding | None = None,
        tokenizer: MorphemeAnalyzer | None = None,
        n_terms: int = 1,
        embedding_weight: float = 0.6,
        heads: Sequence[str] = DEFAULT_CRITERION_HEADS,
        n_nodes: int = 0,
    ) -> None:
        if isinstance(n_terms, bool) or not isinstance(n_terms, int) or n_terms < 1:
            raise ConfigurationError(f"n_terms={n_terms!r} is invalid; use an integer >= 1")
        if not 0.0 <= float(embedding_weight) <= 1.0:
            raise ConfigurationError(
                f"embedding_weight={embedding_weight!r} is invalid; use a float in [0, 1]"
            )
        self.terms = list(terms)
        self.centroids = np.asarray(centroids, dtype=np.float32)
        self.mean_embedding = np.asarray(mean_embedding, dtype=np.float32)
        self.morphemes = list(morphemes)
        self.idf = np.asarray(idf, dtype=np.float32)
        self.cooccurrence = cooccurrence.tocsr()
        self.term_df = [int(x) for x in term_df]
        if self.centroids.ndim != 2 or self.centroids.shape[0] != len(self.terms):
            raise ConfigurationError(
                f"centroids has shape {self.centroids.shape}; expected ({len(self.terms)}, d)"
            )
        if self.cooccurrence.shape != (len(self.terms), len(self.morphemes)):
            raise ConfigurationError(
                f"cooccurrence has shape {self.cooccurrence.shape}; expected "
                f"({len(self.terms)}, {len(self.morphemes)})"
            )
        self.n_terms = n_terms
        self.embedding_weight = float(embedding_weight)
        self.heads = tuple(heads)
        self.n_nodes = int(n_nodes)
        self._morpheme_index = {m: i for i, m in enumerate(self.morphemes)}
        self._cooc_t = self.cooccurrence.T.tocsr()  # M × T: rows are morphemes
        self._embed_model = embed_model
        self._tokenizer = tokenizer
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ build
    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[BaseNode],
        tokenizer: MorphemeAnalyzer | None = None,
        embed_model: BaseEmbedding | None = None,
        embeddings: np.ndarray | Mapping[str, Sequence[float]] | None = None,
        heads: Sequence[str] = DEFAULT_CRITERION_HEADS,
        min_df: int = 2,
        max_df_ratio: float = 0.5,
        max_terms: int = 20000,
        n_terms: int = 1,
        embedding_weight: float = 0.6,
        show_progress: bool = False,
    ) -> CorpusCriterionHypothesizer:
        """Mine the criterion vocabulary of ``nodes`` (never modified).

        Args:
            nodes: the indexed nodes; their ``get_content(MetadataMode.EMBED)`` is analysed.
            tokenizer: anything with ``noun_compounds`` and ``content_morphemes``
                (default ``KiwiTokenizer()``).
            embed_model: embedding for node contexts and queries (default
                ``resolve_embed_model()``: ``$CAR_EMBED_MODEL``, else the offline
                ``MultilingualE5Embedding``). Must be the model whose vectors are in
                ``embeddings`` when those are given.
            embeddings: precomputed node embeddings, an ``N × d`` array in ``nodes`` order or a
                ``{node_id: vector}`` mapping; missing ones fall back to ``node.embedding``,
                then to ``embed_model`` (batched).
            heads: head nouns of criterion terms (default :data:`DEFAULT_CRITERION_HEADS`);
                a compound is a term when it ends with a head and is longer than it.
            min_df: keep terms in at least this many nodes (default 2).
            max_df_ratio: drop terms in more than this share of nodes (default 0.5).
            max_terms: keep at most this many terms, the most frequent first.
            n_terms, embedding_weight: query-time options (see the class docstring).
            show_progress: show a progress bar while analysing nodes.

        Raises:
            ConfigurationError: no nodes, bad options, or no criterion term found.
        """
        if not nodes:
            raise ConfigurationError("nodes is empty; pass the nodes you index")
        if not heads:
            raise ConfigurationError("heads is empty; pass criterion head nouns such as ('기준',)")
        if isinstance(min_df, bool) or not isinstance(min_df, int) or min_df < 1:
            raise ConfigurationError(f"min_df={min_df!r} is invalid; use an integer >= 1")
        if not 0.0 < float(max_df_ratio) <= 1.0:
            raise ConfigurationError(f"max_df_ratio={max_df_ratio!r} must be in (0, 1]")
        tok = tokenizer if tokenizer is not None else _default_tokenizer()
        if not isinstance(tok, MorphemeAnalyzer):
            raise ConfigurationError(
                f"tokenizer {type(tok).__name__} lacks noun_compounds/content_morphemes; "
                "pass a KiwiTokenizer"
            )
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        n = len(texts)
        iterator: Any = range(n)
        if show_progress:
            from tqdm.auto import tqdm

            iterator = tqdm(iterator, desc="criterion vocabulary", unit="node")
        doc_terms: list[set[str]] = []
        doc_morphs: list[set[str]] = []
        for compounds, morphs in _analyse_all(tok, texts, iterator):
            doc_terms.append({c for c in compounds if _is_term(c, heads)})
            doc_morphs.append(set(morphs))

        term_df = Counter(t for terms in doc_terms for t in terms)
        max_df = max(min_df, int(math.floor(max_df_ratio * n)))
        kept = [t for t, df in term_df.items() if min_df <= df <= max_df]
        kept.sort(key=lambda t: (-term_df[t], t))
        kept = kept[:max_terms]
        if not kept:
            raise ConfigurationError(
                f"no criterion term (a noun compound ending in one of {tuple(heads)[:6]}…) occurs "
                f"in >= {min_df} of the {n} nodes; lower min_df or pass other heads"
            )
        term_index = {t: i for i, t in enumerate(kept)}

        morph_df = Counter(m for ms in doc_morphs for m in ms)
        morphemes = sorted(morph_df)
        morph_index = {m: i for i, m in enumerate(morphemes)}
        idf = np.array([math.log1p(n / morph_df[m]) for m in morphemes], dtype=np.float32)

        matrix = cls._node_embeddings(nodes, texts, embeddings, embed_model)
        mean = matrix.mean(axis=0)
        centred = _normalise_rows(matrix - mean)

        from scipy import sparse

        rows: list[int] = []
        cols: list[int] = []
        for j, terms in enumerate(doc_terms):
            for t in terms:
                i = term_index.get(t)
                if i is not None:
                    rows.append(i)
                    cols.append(j)
        term_doc = sparse.csr_matrix(
            (np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(len(kept), n)
        )
        df_vec = np.asarray(term_doc.sum(axis=1)).ravel()
        centroids = _normalise_rows(np.asarray(term_doc @ centred) / df_vec[:, None])

        m_rows: list[int] = []
        m_cols: list[int] = []
        for j, ms in enumerate(doc_morphs):
            for m in ms:
                m_rows.append(j)
                m_cols.append(morph_index[m])
        doc_morph = sparse.csr_matrix(
            (np.ones(len(m_rows), dtype=np.float32), (m_rows, m_cols)), shape=(n, len(morphemes))
        )
        cooc = sparse.diags(1.0 / df_vec).dot(term_doc @ doc_morph).tocsr().astype(np.float32)
        return cls(
            terms=kept,
            centroids=centroids.astype(np.float32),
            mean_embedding=mean.astype(np.float32),
            morphemes=morphemes,
            idf=idf,
            cooccurrence=cooc,
            term_df=[int(x) for x in df_vec],
            embed_model=embed_model,
            tokenizer=tok,
            n_terms=n_terms,
            embedding_weight=embedding_weight,
            heads=heads,
            n_nodes=n,
        )

    @staticmethod
    def _node_embeddings(
        nodes: Sequence[BaseNode],
        texts: Sequence[str],
        embeddings: np.ndarray | Mapping[str, Sequence[float]] | None,
        embed_model: BaseEmbedding | None,
    ) -> np.ndarray:
        n = len(nodes)
        if isinstance(embeddings, np.ndarray):
            if embeddings.ndim != 2 or embeddings.shape[0] != n:
                raise ConfigurationError(
                    f"embeddings has shape {embeddings.shape}; expected ({n}, d) in nodes order"
                )
            return embeddings.astype(np.float32)
        vectors: list[Sequence[float] | None] = []
        for node in nodes:
            vec = None
            if embeddings is not None:
                vec = embeddings.get(node.node_id)
            if vec is None:
                vec = node.embedding
            vectors.append(vec)
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            model = embed_model if embed_model is not None else _default_embed_model()
            new = model.get_text_embedding_batch([texts[i] for i in missing])
            for i, v in zip(missing, new, strict=True):
                vectors[i] = v
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2:
            raise ConfigurationError("node embeddings have inconsistent dimensions")
        return matrix

    # ------------------------------------------------------------------ query time
    @property
    def embed_model(self) -> BaseEmbedding:
        with self._lock:
            if self._embed_model is None:
                self._embed_model = _default_embed_model()
            return self._embed_model

    @property
    def tokenizer(self) -> MorphemeAnalyzer:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = _default_tokenizer()
            return self._tokenizer

    def score_terms(self, query: str, query_embedding: Sequence[float] | None = None) -> np.ndarray:
        """The score ``s(t)`` of every term for ``query`` (see the module docstring)."""
        if query_embedding is None:
            query_embedding = self.embed_model.get_query_embedding(query)
        q = np.asarray(query_embedding, dtype=np.float32)
        if q.shape != self.mean_embedding.shape:
            raise HypothesisError(
                f"query embedding has {q.shape[0]} dims but the centroids have "
                f"{self.mean_embedding.shape[0]}; use the embed_model the hypothesizer was built with"
            )
        q = q - self.mean_embedding
        norm = float(np.linalg.norm(q))
        emb = self.centroids @ (q / norm if norm > 0 else q)
        ids = sorted(
            {self._morpheme_index[m] for m in self.tokenizer.content_morphemes(query)
             if m in self._morpheme_index}
        )
        if ids and self.embedding_weight < 1.0:
            weights = self.idf[ids]
            cooc = np.asarray(self._cooc_t[ids].T @ weights).ravel() / float(weights.sum())
            return self.embedding_weight * _zscore(emb) + (1 - self.embedding_weight) * _zscore(
                cooc
            )
        return _zscore(emb)

    def propose(self, query: str, k: int | None = None) -> list[tuple[str, float]]:
        """The best ``k`` (default ``n_terms``) terms with their scores, best first.

        A term that is a substring of an already chosen term (or contains one) is skipped.
        """
        k = self.n_terms if k is None else k
        scores = self.score_terms(query)
        order = np.argsort(-scores, kind="stable")
        chosen: list[tuple[str, float]] = []
        for i in order:
            term = self.terms[int(i)]
            if any(term in c or c in term for c, _ in chosen):
                continue
            chosen.append((term, float(scores[int(i)])))
            if len(chosen) >= k:
                break
        return chosen

    def hypothesize(self, query: str) -> CriterionHypothesis:
        """Propose the best-fitting corpus criterion terms for ``query``.

        Raises :class:`HypothesisError` for an empty query.
        """
        if not isinstance(query, str) or not query.strip():
            raise HypothesisError("cannot hypothesize a criterion for an empty query")
        start = time.perf_counter()
        chosen = self.propose(query)
        terms = tuple(t for t, _ in chosen)
        return CriterionHypothesis(
            text=" ".join(terms),
            criteria=terms,
            source=self.name,
            cached=False,
            extra={
                "scores": {t: round(s, 4) for t, s in chosen},
                "ms": round((time.perf_counter() - start) * 1000, 3),
            },
        )

    # ------------------------------------------------------------------ persistence
    def persist(self, persist_dir: str | Path) -> None:
        """Write ``corpus_hypothesizer.json``, ``centroids.npy`` and ``cooccurrence.npz``."""
        from scipy import sparse

        path = Path(persist_dir)
        path.mkdir(parents=True, exist_ok=True)
        tok = self._tokenizer
        spec: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "type": "CorpusCriterionHypothesizer",
            "terms": self.terms,
            "term_df": self.term_df,
            "morphemes": self.morphemes,
            "idf": [float(x) for x in self.idf],
            "mean_embedding": [float(x) for x in self.mean_embedding],
            "n_terms": self.n_terms,
            "embedding_weight": self.embedding_weight,
            "heads": list(self.heads),
            "n_nodes": self.n_nodes,
            "tokenizer": tok.to_dict() if tok is not None and hasattr(tok, "to_dict") else None,
            "embed_model": getattr(self._embed_model, "model_name", None),
        }
        np.save(path / _CENTROIDS_NAME, self.centroids, allow_pickle=False)
        sparse.save_npz(path / _COOC_NAME, self.cooccurrence.tocsr())
        (path / _JSON_NAME).write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | Path,
        embed_model: BaseEmbedding | None = None,
        tokenizer: MorphemeAnalyzer | None = None,
    ) -> CorpusCriterionHypothesizer:
        """Load what :meth:`persist` wrote; raises :class:`IndexPersistError` on damage."""
        from scipy import sparse

        path = Path(persist_dir)
        try:
            spec = json.loads((path / _JSON_NAME).read_text(encoding="utf-8"))
            centroids = np.load(path / _CENTROIDS_NAME, allow_pickle=False)
            cooc = sparse.load_npz(path / _COOC_NAME)
        except (OSError, ValueError) as exc:
            raise IndexPersistError(
                f"cannot load a CorpusCriterionHypothesizer from {path}: {exc}; "
                "rebuild it with from_nodes(...).persist(dir)"
            ) from exc
        if spec.get("format_version") != FORMAT_VERSION:
            raise IndexPersistError(
                f"{path / _JSON_NAME} has format_version {spec.get('format_version')!r}; "
                f"this version reads {FORMAT_VERSION}; rebuild it"
            )
        if tokenizer is None and spec.get("tokenizer"):
            from llama_index_car.tokenizers.kiwi import KiwiTokenizer

            tokenizer = KiwiTokenizer.from_dict(spec["tokenizer"])
        return cls(
            terms=spec["terms"],
            centroids=centroids,
            mean_embedding=np.asarray(spec["mean_embedding"], dtype=np.float32),
            morphemes=spec["morphemes"],
            idf=np.asarray(spec["idf"], dtype=np.float32),
            cooccurrence=cooc,
            term_df=spec["term_df"],
            embed_model=embed_model,
            tokenizer=tokenizer,
            n_terms=spec["n_terms"],
            embedding_weight=spec["embedding_weight"],
            heads=spec["heads"],
            n_nodes=spec.get("n_nodes", 0),
        )
