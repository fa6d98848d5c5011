"""Kiwi morpheme tokenizer for Korean retrieval, with domain regexes for technical standards.

:class:`KiwiTokenizer` turns Korean text into BM25 tokens:

1. Domain spans are found by regular expressions (:data:`DOMAIN_PATTERNS`) and handed to Kiwi
   as pre-tokenized spans, so each becomes ONE token: numbers with units (``0.6m``,
   ``1.1 m`` -> ``1.1m``, ``80km/h``, ``3.6%``), ratios (``1:1.5``), article and clause
   references (``제29조의2``, ``5-15``, ``4.2.1``) and Roman numerals (``Ⅲ`` -> ``iii``).
   Kiwi alone splits ``1:1.5`` into ``1:1 . 5`` and ``3.6%를`` into ``3.6 % 르 ᆯ``.
2. Kiwi (``kiwipiepy``) analyses the rest; only morphemes whose tag is in ``keep_tags``
   survive (content morphemes, numbers, foreign words; particles and endings are dropped).
   Verbs and adjectives (VV, VA) are emitted as Kiwi's lemma (``따르다``, ``높다``).
3. Noun compounds: Kiwi splits ``설치기준`` into ``설치`` + ``기준``. With ``compounds="all"``
   the joined run (``설치기준``) is emitted after its parts, so a query for the compound
   prefers documents that use it, while the parts still match spaced forms (``설치 기준``).
4. Forms are canonicalised (spaces and thousands separators removed, Roman numerals to
   ASCII, Latin lower-cased when ``lowercase``), then ``stopwords`` are removed.

The ``kiwipiepy.Kiwi`` object is never stored on the tokenizer: :func:`get_kiwi` creates one
lazily per process and per (workers, model, user dictionary) configuration and shares it, so
the tokenizer pickles and copies cheaply and nothing heavy happens at import.

Example:
    >>> tok = KiwiTokenizer()
    >>> tok.tokenize("배수시설 설치기준은 1.1 m 이상")
    ['배수', '시설', '배수시설', '설치', '기준', '설치기준', '1.1m', '이상']
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llama_index_car._errors import ConfigurationError
from llama_index_car.tokenizers._domain import DOMAIN_PATTERNS, canonical, domain_spans

if TYPE_CHECKING:
    from kiwipiepy import Kiwi, Token


#: Tags of :meth:`KiwiTokenizer.content_morphemes` (the lexical-overlap definition of the
#: shared evaluation sets).
CONTENT_TAGS: tuple[str, ...] = ("NNG", "NNP", "NR", "VV", "VA", "XR", "SL", "SN", "SH")

#: Default retrieval keep-set: nouns, numerals, verb/adjective stems, roots, foreign words,
#: Chinese characters, numbers, and Kiwi's serial/URL/email spans (W_SERIAL carries the
#: clause references found by :data:`DOMAIN_PATTERNS`).
DEFAULT_KEEP_TAGS: tuple[str, ...] = (
    "NNG",
    "NNP",
    "NR",
    "VV",
    "VA",
    "XR",
    "SL",
    "SH",
    "SN",
    "W_SERIAL",
    "W_URL",
    "W_EMAIL",
)

_NOUN_TAGS = frozenset({"NNG", "NNP"})
_LEMMA_TAGS = frozenset({"VV", "VA", "VV-I", "VA-I", "VV-R", "VA-R"})

_KIWI_CACHE: dict[tuple[Any, ...], Kiwi] = {}
#: Fields that change speed, not tokens: left out of the spec and its hash.
_NOT_SPEC = {"num_workers", "processes", "min_texts_per_process"}
_KIWI_LOCK = threading.Lock()


def _resolve_workers(num_workers: int | None) -> int:
    if num_workers is None or num_workers < 0:
        return os.cpu_count() or 1
    return num_workers


def get_kiwi(
    num_workers: int | None = None,
    model_type: str | None = None,
    user_words: Sequence[tuple[str, str, float]] = (),
) -> Kiwi:
    """The process-wide ``kiwipiepy.Kiwi`` for this configuration, created on first use.

    Args:
        num_workers: Kiwi threads for batch analysis; ``None`` or ``-1`` = all cores,
            ``0`` = single-threaded. Single texts are analysed on the calling thread either way.
        model_type: Kiwi model (``None`` = kiwipiepy's default, e.g. ``"cong"`` in 0.24).
        user_words: ``(word, tag, score)`` entries added with ``Kiwi.add_user_word``.

    The object is cached per ``(workers, model_type, user_words)`` and reused; loading the
    model takes about a second.

    Example:
        >>> get_kiwi() is get_kiwi()
        True
    """
    workers = _resolve_workers(num_workers)
    key = (workers, model_type, tuple(tuple(w) for w in user_words))
    kiwi = _KIWI_CACHE.get(key)
    if kiwi is not None:
        return kiwi
    with _KIWI_LOCK:
        kiwi = _KIWI_CACHE.get(key)
        if kiwi is None:
            from kiwipiepy import Kiwi

            kw: dict[str, Any] = {"num_workers": workers}
            if model_type is not None:
                kw["model_type"] = model_type
            kiwi = Kiwi(**kw)
            for word, tag, score in user_words:
                kiwi.add_user_word(word, tag, score)
            _KIWI_CACHE[key] = kiwi
    return kiwi


class KiwiTokenizer(BaseModel):
    """Kiwi tokenizer for Korean BM25 (see the module docstring for the pipeline).

    ``tokenize(text)`` and ``tokenizer(text)`` return retrieval tokens;
    ``tokenize_batch(texts)`` analyses many texts on all cores (Kiwi's own thread pool).

    Example:
        >>> KiwiTokenizer(compounds="none")("제29조의2에 따른 경사 1:1.5를 지켜야 한다")
        ['제29조의2', '따르다', '경사', '1:1.5', '지키다']
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    keep_tags: tuple[str, ...] = Field(
        default=DEFAULT_KEEP_TAGS,
        description="Kiwi POS tags kept as retrieval tokens; all others (particles J*, "
        "endings E*, suffixes X*, symbols S*) are dropped.",
    )
    stopwords: tuple[str, ...] = Field(
        default=(), description="Tokens removed after canonicalisation (compare lower-cased)."
    )
    compounds: Literal["none", "criterion", "all"] = Field(
        default="all",
        description="Noun-compound tokens added after their parts: 'none' = Kiwi parts only; "
        "'criterion' = only runs ending in a `compound_heads` noun (설치기준); 'all' = every "
        "run of >= 2 adjacent NNG/NNP within an eojeol (배수시설, 설치기준).",
    )
    compound_heads: tuple[str, ...] = Field(
        default=("기준", "지침", "규정", "요령", "편람", "기준서", "규격", "조건"),
        description="Head nouns that make a compound a criterion (used by compounds='criterion').",
    )
    normalize_domain: bool = Field(
        default=True,
        description="Apply DOMAIN_PATTERNS (units, ratios, clause refs, Roman numerals) "
        "as single pre-tokenized spans.",
    )
    lowercase: bool = Field(default=True, description="Lower-case Latin letters in tokens.")
    user_words: tuple[tuple[str, str, float], ...] = Field(
        default=(),
        description="User dictionary entries (word, Kiwi tag, score) added to Kiwi, e.g. "
        "('배수시설', 'NNG', 0.0) to keep a domain compound unsplit.",
    )
    model_type: str | None = Field(
        default=None, description="Kiwi model type; None = kiwipiepy's default."
    )
    num_workers: int | None = Field(
        default=None,
        description="Kiwi threads for tokenize_batch; None/-1 = all cores, 0 = one thread. "
        "Does not change the tokens (not part of the spec).",
    )
    processes: int | None = Field(
        default=1,
        description="Processes for tokenize_batch: 1 = this process (Kiwi threads only); "
        "N > 1 = N worker processes (spawned, each with a single-threaded Kiwi) analyse "
        "contiguous slices; None/-1 = one per core. Batches below "
        "`min_texts_per_process` * processes stay in this process. As with any spawned "
        "pool, a calling script must guard its entry point with "
        "`if __name__ == '__main__':`. Does not change the tokens (not part of the spec).",
    )
    max_chars_per_call: int = Field(
        default=10_000,
        ge=1_000,
        description="Texts longer than this are analysed in pieces of at most this many "
        "characters, cut at a line break (else a space) so no noun compound or domain span is "
        "split; tokens are concatenated in order. Kiwi's memory grows steeply with the length "
        "of one call (a 200,000-character table cell took ~1.3 GB in one call, ~7 MB in "
        "10,000-character pieces). Texts up to this length are analysed whole, as before.",
    )
    min_texts_per_process: int = Field(
        default=256,
        ge=1,
        description="tokenize_batch uses worker processes only when each gets at least this "
        "many texts (starting a worker and loading its Kiwi model takes about a second).",
    )

    @field_validator("keep_tags")
    @classmethod
    def _check_tags(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ConfigurationError("keep_tags must name at least one Kiwi tag, e.g. 'NNG'")
        return tuple(v)

    @field_validator("processes")
    @classmethod
    def _check_processes(cls, v: int | None) -> int | None:
        if v is not None and v != -1 and v < 1:
            raise ConfigurationError(f"processes must be >= 1, -1 or None (all cores), got {v}")
        return v

    @field_validator("user_words")
    @classmethod
    def _check_user_words(
        cls, v: tuple[tuple[str, str, float], ...]
    ) -> tuple[tuple[str, str, float], ...]:
        for entry in v:
            word, tag, _ = entry
            if not word or any(c.isspace() for c in word):
                raise ConfigurationError(
                    f"user word {word!r} must be a non-empty string without spaces"
                )
            if not tag.isupper():
                raise ConfigurationError(f"user word {word!r}: tag {tag!r} is not a Kiwi tag")
        return tuple((w, t, float(s)) for w, t, s in v)

    # ------------------------------------------------------------------ Kiwi access
    def kiwi(self) -> Kiwi:
        """The shared Kiwi for this configuration (see :func:`get_kiwi`)."""
        return get_kiwi(self.num_workers, self.model_type, self.user_words)

    def _pretokenized(self) -> Callable[[str], list[tuple[int, int, str]]] | None:
        return domain_spans if self.normalize_domain else None

    # ------------------------------------------------------------------ retrieval tokens
    def _tokens_from(self, morphs: Sequence[Token]) -> list[str]:
        return retrieval_tokens(
            morphs, keep=frozenset(self.keep_tags),
            stop=frozenset(s.lower() if self.lowercase else s for s in self.stopwords),
            heads=frozenset(self.compound_heads), compounds=self.compounds,
            lowercase=self.lowercase,
        )

    def tokenize(self, text: str) -> list[str]:
        """Retrieval tokens of one text (see the module docstring for the steps)."""
        if not isinstance(text, str):
            raise ConfigurationError(f"tokenize expects a str, got {type(text).__name__}")
        if not text.strip():
            return []
        kiwi, pre = self.kiwi(), self._pretokenized()
        out: list[str] = []
        for piece in _pieces(text, self.max_chars_per_call):
            out.extend(self._tokens_from(kiwi.tokenize(piece, pretokenized=pre)))
        return out

    def __call__(self, text: str) -> list[str]:
        """Same as :meth:`tokenize`, so the tokenizer can be passed where a callable is expected."""
        return self.tokenize(text)

    def tokenize_batch(
        self, texts: Iterable[str], *, show_progress: bool = False
    ) -> list[list[str]]:
        """Retrieval tokens of many texts, in order.

        With ``processes == 1`` (default) the texts go through ``Kiwi.tokenize(iterable)``
        with the Kiwi created with ``num_workers`` threads. With ``processes > 1`` (and enough
        texts, see ``min_texts_per_process``) they are cut into contiguous slices analysed by
        that many spawned worker processes, each running this tokenizer with a single-threaded
        Kiwi; the result is identical, in the same order.
        """
        items = list(texts)
        for i, t in enumerate(items):
            if not isinstance(t, str):
                raise ConfigurationError(
                    f"tokenize_batch: item {i} is {type(t).__name__}, expected str"
                )
        if not items:
            return []
        if any(len(t) > self.max_chars_per_call for t in items):  # rare: oversize texts
            owners: list[int] = []
            flat: list[str] = []
            for i, t in enumerate(items):
                for piece in _pieces(t, self.max_chars_per_call):
                    owners.append(i)
                    flat.append(piece)
            grouped: list[list[str]] = [[] for _ in items]
            for i, toks in zip(owners, self.tokenize_batch(flat, show_progress=show_progress),
                               strict=True):
                grouped[i].extend(toks)
            return grouped
        procs = _resolve_workers(self.processes) if self.processes != 1 else 1
        procs = min(procs, len(items) // self.min_texts_per_process)
        if procs > 1:
            return _tokenize_processes(self, items, procs, show_progress)
        kiwi = self.kiwi()
        pre = self._pretokenized()
        stream: Iterator[list[Token]]
        if _resolve_workers(self.num_workers) == 0:  # Kiwi has no batch API without threads
            stream = (kiwi.tokenize(t, pretokenized=pre) for t in items)
        else:
            stream = kiwi.tokenize(iter(items), pretokenized=pre)
        if show_progress:
            from tqdm.auto import tqdm

            stream = iter(tqdm(stream, total=len(items), desc="Kiwi tokenize", unit="text"))
        return [self._tokens_from(m) for m in stream]

    # ------------------------------------------------------------------ analysis helpers
    def _plain(self, text: str) -> list[Token]:
        return list(self.kiwi().tokenize(text)) if text.strip() else []

    def content_morphemes(self, text: str, *, lemmas: bool = False) -> list[str]:
        """Content morphemes in text order (repeats kept), for lexical-overlap measures.

        Plain Kiwi analysis (no domain regexes, no lower-casing) keeping tags
        :data:`CONTENT_TAGS` = NNG NNP NR VV VA XR SL SN SH (sub-tags such as ``VV-R``
        included). Every morpheme is given as its surface form (``따르``, ``높``): this is the
        definition that reproduces the overlap tables of the ``../shared/eval`` READMEs
        exactly, and the one :mod:`llama_index_car.evaluation.overlap` uses. With
        ``lemmas=True`` VV/VA are given as Kiwi's lemma instead (``따르다``, ``높다``).

        >>> KiwiTokenizer().content_morphemes("높은 기준을 따른다")
        ['높', '기준', '따르']
        >>> KiwiTokenizer().content_morphemes("높은 기준을 따른다", lemmas=True)
        ['높다', '기준', '따르다']
        """
        tags = frozenset(CONTENT_TAGS)
        return [
            t.lemma if lemmas and t.tag in _LEMMA_TAGS else t.form
            for t in self._plain(text)
            if t.tag in tags or t.tag.split("-")[0] in tags
        ]

    def noun_compounds(self, text: str) -> list[str]:
        """Maximal runs of >= 2 adjacent NNG/NNP morphemes, joined, in text order.

        Runs never cross a space or any other morpheme.

        >>> KiwiTokenizer().noun_compounds("배수시설 설치기준을 따른다")
        ['배수시설', '설치기준']
        """
        return _noun_runs(self._plain(text))

    # ------------------------------------------------------------------ spec
    def user_dict_sha256(self) -> str:
        """sha256 of the user dictionary as canonical JSON (empty dictionary included)."""
        blob = json.dumps([list(w) for w in self.user_words], ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able spec: config, kiwipiepy and model versions, regexes, dictionary hash.

        ``spec_hash`` covers everything that changes tokens except library versions, which
        are compared separately (a version bump may or may not change the analysis).
        """
        import kiwipiepy

        try:
            import kiwipiepy_model

            model_version = str(getattr(kiwipiepy_model, "__version__", "unknown"))
            model_name = os.path.basename(
                os.path.dirname(os.path.abspath(kiwipiepy_model.__file__))
            )
        except ImportError:  # pragma: no cover - kiwipiepy_model is a dependency
            model_version, model_name = "missing", "missing"
        config = self.model_dump(mode="json", exclude=_NOT_SPEC)
        return {
            "type": "KiwiTokenizer",
            "config": config,
            "kiwipiepy_version": kiwipiepy.__version__,
            "model_version": model_version,
            "model_path_name": model_name,
            "model_type": self.model_type or "default",
            "patterns": [list(p) for p in DOMAIN_PATTERNS] if self.normalize_domain else [],
            "user_dict_sha256": self.user_dict_sha256(),
            "spec_hash": self.spec_hash,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KiwiTokenizer:
        """Rebuild a tokenizer from :meth:`to_dict` output (its ``config`` part)."""
        if not isinstance(d, dict) or d.get("type") != "KiwiTokenizer" or "config" not in d:
            raise ConfigurationError(
                "not a KiwiTokenizer spec: expected a dict with type='KiwiTokenizer' and "
                "'config' (the output of KiwiTokenizer.to_dict())"
            )
        cfg = dict(d["config"])
        cfg["user_words"] = tuple(tuple(w) for w in cfg.get("user_words", ()))
        return cls(**cfg)

    @property
    def spec_hash(self) -> str:
        """sha256 over the token-changing config and the domain regexes (not versions)."""
        payload = {
            "config": self.model_dump(mode="json", exclude=_NOT_SPEC),
            "patterns": [list(p) for p in DOMAIN_PATTERNS] if self.normalize_domain else [],
        }
        blob = json.dumps(payload, ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _pieces(text: str, limit: int) -> list[str]:
    """``text`` cut into pieces of at most ``limit`` characters, each cut at the last line
    break of its window (else the last space; else hard at ``limit``). Joined, the pieces are
    ``text``.

    >>> _pieces("ab cd ef", 6)
    ['ab cd ', 'ef']
    """
    if len(text) <= limit:
        return [text]
    out: list[str] = []
    start = 0
    while len(text) - start > limit:
        end = start + limit
        cut = text.rfind("\n", start + 1, end)
        if cut < 0:
            cut = text.rfind(" ", start + 1, end)
        cut = end if cut < 0 else cut + 1
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def _tokenize_slice(tokenizer: KiwiTokenizer, texts: list[str]) -> list[list[str]]:
    """Worker-process entry of :meth:`KiwiTokenizer.tokenize_batch` (module level: picklable)."""
    return tokenizer.tokenize_batch(texts)


def retrieval_tokens(
    morphs: Sequence[Token],
    *,
    keep: frozenset[str],
    stop: frozenset[str],
    heads: frozenset[str],
    compounds: str,
    lowercase: bool,
) -> list[str]:
    """The retrieval tokens of one analysis: kept tags (VV/VA as lemmas), canonicalised, and
    noun compounds (runs of >= 2 adjacent NNG/NNP; ``compounds="criterion"``: only those
    ending in a ``heads`` noun) after their parts; ``stop`` removed."""
    out: list[str] = []
    run: list[Token] = []

    def flush() -> None:
        if len(run) >= 2 and (compounds == "all" or run[-1].form in heads):
            out.append(canonical("".join(t.form for t in run), lowercase))
        run.clear()

    for t in morphs:
        tag = t.tag.split("-", 1)[0] if "-" in t.tag else t.tag
        if compounds != "none":
            if tag in _NOUN_TAGS and (not run or run[-1].end == t.start):
                run.append(t)
            else:
                flush()
                if tag in _NOUN_TAGS:
                    run.append(t)
        if tag in keep:
            form = t.lemma if t.tag in _LEMMA_TAGS else t.form
            out.append(canonical(form, lowercase))
    flush()
    return [t for t in out if t and t not in stop] if stop else [t for t in out if t]


def _noun_runs(morphs: Sequence[Token]) -> list[str]:
    """Maximal runs of >= 2 adjacent NNG/NNP morphemes, joined, in order."""
    out: list[str] = []
    run: list[Token] = []
    for t in [*morphs, None]:
        if t is not None and t.tag in _NOUN_TAGS and (not run or run[-1].end == t.start):
            run.append(t)
            continue
        if len(run) >= 2:
            out.append("".join(m.form for m in run))
        run = [t] if t is not None and t.tag in _NOUN_TAGS else []
    return out


def _tokenize_processes(
    tokenizer: KiwiTokenizer, items: list[str], procs: int, show_progress: bool
) -> list[list[str]]:
    """:meth:`KiwiTokenizer.tokenize_batch` on ``procs`` spawned worker processes (contiguous
    slices, order kept), each running ``tokenizer`` with a single-threaded Kiwi."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    worker = tokenizer.model_copy(update={"processes": 1, "num_workers": 0})
    # ~8 slices per process: balances uneven texts; order is kept by map()
    size = max(1, -(-len(items) // (procs * 8)))
    slices = [items[i : i + size] for i in range(0, len(items), size)]
    out: list[list[str]] = []
    with ProcessPoolExecutor(procs, mp_context=mp.get_context("spawn")) as pool:
        results: Iterator[list[list[str]]] = pool.map(
            _tokenize_slice, [worker] * len(slices), slices
        )
        if show_progress:
            from tqdm.auto import tqdm

            results = iter(tqdm(results, total=len(slices), desc=f"Kiwi x{procs}", unit="slice"))
        for part in results:
            out.extend(part)
    return out
