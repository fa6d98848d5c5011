"""KiwiTokenizer: domain regexes, keep-set, compounds, sharing, batch, spec."""

from __future__ import annotations

import hashlib
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_car._errors import ConfigurationError
from llama_index_car.tokenizers.kiwi import DOMAIN_PATTERNS, KiwiTokenizer, domain_spans, get_kiwi

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tok() -> KiwiTokenizer:
    return KiwiTokenizer()


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("폭 0.6m 이상", "0.6m"),
        ("높이 1.1 m 이하", "1.1m"),
        ("설계속도 80km/h 구간", "80km/h"),
        ("비탈면 경사 1:1.5를 지킨다", "1:1.5"),
        ("종단경사 3.6%를 적용", "3.6%"),
        ("표 5-15에 따른다", "5-15"),
        ("제29조의2에 따라", "제29조의2"),
        ("4.2.1 항의 규정", "4.2.1"),
        ("Ⅲ. 설계기준", "iii"),
        ("II 단계", "ii"),
        ("면적 1,000 m² 이상", "1000m²"),
        ("강도 24 MPa 이상", "24mpa"),
    ],
)
def test_domain_spans_are_single_tokens(tok: KiwiTokenizer, text: str, token: str) -> None:
    assert token in tok.tokenize(text)


def test_without_domain_normalisation_kiwi_splits_units() -> None:
    plain = KiwiTokenizer(normalize_domain=False, compounds="none")
    toks = plain.tokenize("비탈면 경사 1:1.5 폭 0.6m")
    assert "1:1.5" not in toks and "0.6m" not in toks
    assert KiwiTokenizer(compounds="none").tokenize("비탈면 경사 1:1.5 폭 0.6m") == [
        "비탈",
        "면",
        "경사",
        "1:1.5",
        "폭",
        "0.6m",
    ]


def test_domain_spans_positions_and_no_overlap() -> None:
    text = "제3조 4.2.1 5-15 1:2 3.6% Ⅳ 12"
    spans = domain_spans(text)
    assert [text[s:e] for s, e, _ in spans] == [
        "제3조",
        "4.2.1",
        "5-15",
        "1:2",
        "3.6%",
        "Ⅳ",
        "12",
    ]
    assert all(e1 <= s2 for (_, e1, _), (s2, _, _) in zip(spans, spans[1:], strict=False))


def test_particles_and_endings_dropped_lemmas_kept(tok: KiwiTokenizer) -> None:
    toks = KiwiTokenizer(compounds="none").tokenize("높은 기준을 지켜야 한다")
    assert toks == ["높다", "기준", "지키다"]
    assert not {"은", "을", "다", "어야"} & set(tok.tokenize("기준을 지켜야 한다"))


def test_compound_modes() -> None:
    text = "배수시설 설치기준 배수 시설"
    assert KiwiTokenizer(compounds="none").tokenize(text) == [
        "배수",
        "시설",
        "설치",
        "기준",
        "배수",
        "시설",
    ]
    assert KiwiTokenizer(compounds="all").tokenize(text) == [
        "배수",
        "시설",
        "배수시설",
        "설치",
        "기준",
        "설치기준",
        "배수",
        "시설",
    ]
    assert KiwiTokenizer(compounds="criterion").tokenize(text) == [
        "배수",
        "시설",
        "설치",
        "기준",
        "설치기준",
        "배수",
        "시설",
    ]


def test_stopwords_and_lowercase() -> None:
    t = KiwiTokenizer(stopwords=("기준", "CCTV"), compounds="none")
    assert t.tokenize("설치기준 CCTV 카메라") == ["설치", "카메라"]
    assert KiwiTokenizer(lowercase=False).tokenize("CCTV") == ["CCTV"]


def test_keep_tags_configurable() -> None:
    nouns_only = KiwiTokenizer(keep_tags=("NNG",), compounds="none", normalize_domain=False)
    assert nouns_only.tokenize("높은 기준 3개 CCTV") == ["기준"]
    with pytest.raises(ValueError, match="keep_tags"):
        KiwiTokenizer(keep_tags=())


def test_user_dictionary_keeps_a_domain_word_whole() -> None:
    assert KiwiTokenizer(compounds="none").tokenize("렌즈형배수로") != ["렌즈형배수로"]
    t = KiwiTokenizer(user_words=(("렌즈형배수로", "NNP", 0.0),))
    assert t.tokenize("렌즈형배수로 설치") == ["렌즈형배수로", "설치"]
    with pytest.raises(ValueError, match="without spaces"):
        KiwiTokenizer(user_words=(("두 단어", "NNG", 0.0),))
    with pytest.raises(ValueError, match="not a Kiwi tag"):
        KiwiTokenizer(user_words=(("단어", "nng", 0.0),))


def test_empty_and_non_string_inputs(tok: KiwiTokenizer) -> None:
    assert tok.tokenize("") == [] and tok("   ") == []
    assert tok.tokenize_batch([]) == []
    with pytest.raises(ConfigurationError, match="expects a str"):
        tok.tokenize(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="item 1"):
        tok.tokenize_batch(["가", None])  # type: ignore[list-item]


def test_batch_equals_single_in_order_for_each_worker_setting() -> None:
    texts = [
        "배수시설 설치기준은 0.6m 이상",
        "",
        "제29조의2에 따른 비탈면 경사 1:1.5",
        "도로의 구조·시설 기준에 관한 규칙",
    ] * 5
    expected = [KiwiTokenizer().tokenize(t) for t in texts]
    for workers in (0, 2):
        assert KiwiTokenizer(num_workers=workers).tokenize_batch(texts) == expected
    assert KiwiTokenizer().tokenize_batch(texts, show_progress=True) == expected


def test_kiwi_is_shared_and_not_created_at_import() -> None:
    code = (
        "import sys; from llama_index_car.tokenizers import kiwi as k; "
        "t = k.KiwiTokenizer(); "
        "print('kiwipiepy' in sys.modules, len(k._KIWI_CACHE))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO)},
        timeout=60,
        check=True,
    ).stdout.split()
    assert out == ["False", "0"]
    assert get_kiwi() is get_kiwi()
    assert KiwiTokenizer().kiwi() is KiwiTokenizer(stopwords=("x",)).kiwi()


def test_pickle_does_not_carry_kiwi(tok: KiwiTokenizer) -> None:
    tok.tokenize("워밍업")
    blob = pickle.dumps(tok)
    assert len(blob) < 5000
    again = pickle.loads(blob)
    assert again == tok and again.tokenize("설치기준") == tok.tokenize("설치기준")


def test_content_morphemes_lemmas_and_tags(tok: KiwiTokenizer) -> None:
    assert tok.content_morphemes("높은 기준을 따른다") == ["높", "기준", "따르"]
    assert tok.content_morphemes("높은 기준을 따른다", lemmas=True) == ["높다", "기준", "따르다"]
    # plain Kiwi: no domain spans, no lower-casing, numbers and Latin split as Kiwi does
    assert tok.content_morphemes("CCTV 0.6m") == ["CCTV", "0.6", "m"]
    assert tok.content_morphemes("") == []


def test_noun_compounds_do_not_cross_spaces(tok: KiwiTokenizer) -> None:
    assert tok.noun_compounds("배수시설 설치기준을 따른다") == ["배수시설", "설치기준"]
    assert tok.noun_compounds("배수 시설 설치 기준") == []
    assert tok.noun_compounds("도로배수시설설치기준") == ["도로배수시설설치기준"]


def test_spec_roundtrip_and_hash() -> None:
    t = KiwiTokenizer(stopwords=("가",), user_words=(("렌즈형배수로", "NNP", 0.0),))
    spec = t.to_dict()
    json.dumps(spec)  # JSON-able
    assert KiwiTokenizer.from_dict(spec) == t
    assert KiwiTokenizer.from_dict(json.loads(json.dumps(spec))) == t
    import kiwipiepy

    assert spec["kiwipiepy_version"] == kiwipiepy.__version__
    assert spec["patterns"] == [list(p) for p in DOMAIN_PATTERNS]
    expected_sha = hashlib.sha256(
        json.dumps([["렌즈형배수로", "NNP", 0.0]], ensure_ascii=False).encode()
    ).hexdigest()
    assert spec["user_dict_sha256"] == expected_sha
    assert spec["spec_hash"] == t.spec_hash
    assert KiwiTokenizer(num_workers=1).spec_hash == KiwiTokenizer().spec_hash
    assert KiwiTokenizer(compounds="none").spec_hash != KiwiTokenizer().spec_hash
    assert KiwiTokenizer(normalize_domain=False).to_dict()["patterns"] == []
    with pytest.raises(ConfigurationError, match="KiwiTokenizer spec"):
        KiwiTokenizer.from_dict({"type": "Other"})


@pytest.mark.corpus
def test_content_morphemes_reproduce_the_shared_overlap_table(tok: KiwiTokenizer) -> None:
    """autorag_ko/README.md: mean 0.747, median 0.765 (best gold, title+text, n=59)."""
    folder = REPO / ".." / "shared" / "eval" / "autorag_ko"
    if not (folder / "corpus.jsonl").is_file():
        pytest.skip("../shared/eval is not present")
    docs = {}
    for line in (folder / "corpus.jsonl").read_text("utf-8").splitlines():
        d = json.loads(line)
        docs[d["_id"]] = (d.get("title") or "") + " " + d["text"]
    qrels: dict[str, list[str]] = {}
    for line in (folder / "qrels.tsv").read_text("utf-8").splitlines()[1:]:
        qid, did, _ = line.split("\t")
        qrels.setdefault(qid, []).append(did)
    overlaps = []
    for line in (folder / "queries.jsonl").read_text("utf-8").splitlines():
        q = json.loads(line)
        qm = set(tok.content_morphemes(q["text"]))
        overlaps.append(
            max(len(qm & set(tok.content_morphemes(docs[g]))) / len(qm) for g in qrels[q["_id"]])
        )
    assert len(overlaps) == 59
    assert round(sum(overlaps) / len(overlaps), 3) == 0.747
    assert round(sorted(overlaps)[29], 3) == 0.765


def test_process_pool_gives_identical_tokens_in_order() -> None:
    texts = [f"배수시설 설치기준은 {i}.5 m 이상, 제{i}조의2 Ⅲ항을 따른다" for i in range(120)]
    texts[7] = ""  # empty texts keep their place
    one = KiwiTokenizer().tokenize_batch(texts)
    two = KiwiTokenizer(processes=2, min_texts_per_process=10).tokenize_batch(texts)
    assert two == one and two[7] == [] and "120" not in " ".join(two[0])
    assert KiwiTokenizer(processes=2).spec_hash == KiwiTokenizer().spec_hash
    with pytest.raises(ValueError, match="processes"):
        KiwiTokenizer(processes=0)


def test_long_texts_are_analysed_in_pieces_with_the_same_tokens() -> None:
    """Issue 13: one oversize table row (a 200,000-character cell passes every reader limit)
    made Kiwi use ~1.3 GB in one call. Texts over ``max_chars_per_call`` are cut at line
    breaks / spaces; the tokens equal the whole-text analysis for text cut at line breaks."""
    from llama_index_car.tokenizers.kiwi import _pieces

    line = "교량 점검통로의 폭은 600 mm 이상으로 하고 배수시설 설치기준에 따른다."
    text = "\n".join(f"{i}. {line}" for i in range(600))  # ~30,000 characters
    pieces = _pieces(text, 10_000)
    assert "".join(pieces) == text and len(pieces) >= 3
    assert all(len(p) <= 10_000 and p.endswith("\n") for p in pieces[:-1])
    whole = KiwiTokenizer(max_chars_per_call=10**9)
    cut = KiwiTokenizer()
    assert cut.max_chars_per_call == 10_000
    assert cut.tokenize(text) == whole.tokenize(text)
    batch = cut.tokenize_batch(["짧은 문장", text, "교량 점검"])
    assert batch == [whole.tokenize("짧은 문장"), whole.tokenize(text), whole.tokenize("교량 점검")]
    no_space = "가" * 25_000  # no break anywhere: hard cuts, still every character analysed
    assert [len(p) for p in _pieces(no_space, 10_000)] == [10_000, 10_000, 5_000]
    assert cut.spec_hash != whole.spec_hash  # the setting is part of the tokenizer spec
