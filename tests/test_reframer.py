"""CriterialReframer: the paper's criterial reframing as a LlamaIndex TransformComponent."""

from __future__ import annotations

import asyncio
import doctest

import pytest
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.ingestion.pipeline import get_transformation_hash
from llama_index.core.schema import (
    Document,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)

from llama_index_car.transformers import CriterialReframer
from llama_index_car.transformers import reframing as reframing_mod

TITLE = "교량 고정식 점검시설 확충방안"
BODY = (
    "점검시설의 구조기준은 별도로 정한다. 점검시설의 설치기준은 다음과 같다.\n"
    "통로 폭은 0.6 m 이상으로 하며, 설치기준에 따라 난간을 둔다."
)


def node(title: str = TITLE, body: str = BODY, **meta: object) -> TextNode:
    return TextNode(
        id_=f"n-{abs(hash((title, body))) % 10_000}",
        text=f"## {title}\n\n{body}",
        metadata={"section_title": title, "heading_path": f"3장 > {title}", **meta},
    )


def test_doctests() -> None:
    assert doctest.testmod(reframing_mod).failed == 0


def test_first_mode_cf_rewrites_metadata_and_header() -> None:
    (out,) = CriterialReframer()([node()])
    assert out.metadata["section_title"] == "교량 고정식 점검시설 구조기준"
    assert out.get_content(MetadataMode.NONE) == f"## 교량 고정식 점검시설 구조기준\n\n{BODY}"
    assert out.metadata["original_section_title"] == TITLE
    assert out.metadata["reframed_criteria"] == ["구조기준"]
    assert out.metadata["heading_path"] == "3장 > 교량 고정식 점검시설 구조기준"
    # the original (plan-framed) title must not leak back into the embedded text
    embedded = out.get_content(MetadataMode.EMBED)
    assert "확충방안" not in embedded
    assert "reframed_criteria" not in out.get_content(MetadataMode.LLM)
    assert out.node_id == node().node_id


@pytest.mark.parametrize(
    ("kwargs", "title"),
    [
        ({"mode": "first", "form": "cfp"}, f"{TITLE} 구조기준"),
        ({"mode": "most_frequent"}, "교량 고정식 점검시설 설치기준"),  # 설치기준 ×2 vs 구조기준 ×1
        ({"mode": "all"}, "교량 고정식 점검시설 구조기준 설치기준"),
        ({"mode": "all", "max_criteria": 1}, "교량 고정식 점검시설 구조기준"),
    ],
)
def test_modes_and_forms(kwargs: dict[str, object], title: str) -> None:
    (out,) = CriterialReframer(**kwargs)([node()])  # type: ignore[arg-type]
    assert out.metadata["section_title"] == title
    assert out.text.splitlines()[0] == f"## {title}"


def test_most_frequent_tie_breaks_by_body_order() -> None:
    body = "안전기준과 설치기준. 설치기준과 안전기준."
    (out,) = CriterialReframer(mode="most_frequent")([node(body=body)])
    assert out.metadata["reframed_criteria"] == ["안전기준"]


def test_oracle_mode_reads_metadata() -> None:
    nodes = [
        node(oracle_criterion="배수기준"),          # not even in the body: injected as given
        node(oracle_criterion=["설치기준"]),
        node(),                                      # no oracle → untouched
    ]
    out = CriterialReframer(mode="oracle")(nodes)
    assert out[0].metadata["section_title"] == "교량 고정식 점검시설 배수기준"
    assert out[1].metadata["section_title"] == "교량 고정식 점검시설 설치기준"
    assert out[2].metadata["section_title"] == TITLE
    assert "original_section_title" not in out[2].metadata


@pytest.mark.parametrize(
    ("title", "body"),
    [
        ("포장 설계기준", BODY),                     # standard-framed
        ("설치기준 개선방안", "구조기준은 …"),         # mixed
        ("개요", BODY),                              # neither
        (TITLE, "점검시설은 필요에 따라 둔다."),       # plan, but no body criterion
        ("점검시설 설치기준 확충방안", "설치기준은 …"),  # criterion already in the title
    ],
)
def test_untouched_cases(title: str, body: str) -> None:
    original = node(title=title, body=body)
    (out,) = CriterialReframer()([original])
    assert out.metadata == original.metadata
    assert out.text == original.text


def test_mixed_frames_opt_in() -> None:
    mixed = node(title="설치기준 개선방안", body="구조기준은 …")
    (out,) = CriterialReframer(frames=("plan", "mixed"))([mixed])
    assert out.metadata["section_title"] == "설치기준 구조기준"


def test_mirror_title_keys() -> None:
    n = node(title=TITLE)
    n.metadata["title"] = TITLE
    (out,) = CriterialReframer()([n])
    assert out.metadata["title"] == "교량 고정식 점검시설 구조기준"
    assert "확충" not in out.get_content(MetadataMode.EMBED)
    m = node(title=TITLE)
    m.metadata["title"] = "설계실무지침 2024"
    assert CriterialReframer()([m])[0].metadata["title"] == "설계실무지침 2024"
    assert CriterialReframer(mirror_title_keys=())([n])[0].metadata["title"] == TITLE


def _chunk(i: int, body: str, doc: str = "doc1", title: str = TITLE) -> TextNode:
    return TextNode(
        id_=f"{doc}#chunk{i}",
        text=f"## {title}\n\n{body}",
        metadata={"section_title": title, "heading_path": title, "section": 0},
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc)},
    )


def test_section_scope_shares_one_header_across_chunks() -> None:
    chunks = [
        _chunk(0, "점검시설은 유지관리를 위해 확충한다."),    # no criterion in this chunk
        _chunk(1, "점검시설의 설치기준은 다음과 같다."),
        _chunk(0, "점검시설은 필요하다.", doc="doc2"),         # same title, other document
    ]
    out = CriterialReframer()(chunks)
    assert [n.metadata["section_title"] for n in out] == [
        "교량 고정식 점검시설 설치기준", "교량 고정식 점검시설 설치기준", TITLE,
    ]
    assert out[0].text == "## 교량 고정식 점검시설 설치기준\n\n점검시설은 유지관리를 위해 확충한다."
    per_node = CriterialReframer(scope="node")(chunks)
    assert [n.metadata["section_title"] for n in per_node] == [
        TITLE, "교량 고정식 점검시설 설치기준", TITLE,
    ]
    assert get_transformation_hash(chunks, CriterialReframer()) != get_transformation_hash(
        chunks, CriterialReframer(scope="node")
    )


def test_heading_path_as_list() -> None:
    n = TextNode(text=BODY, metadata={"section_title": TITLE, "heading_path": ["3장", TITLE]})
    (out,) = CriterialReframer()([n])
    assert out.metadata["heading_path"] == ["3장", "교량 고정식 점검시설 구조기준"]
    other = TextNode(text=BODY, metadata={"section_title": TITLE, "heading_path": "3장 > 다른"})
    assert CriterialReframer()([other])[0].metadata["heading_path"] == "3장 > 다른"


def test_title_only_in_text_header() -> None:
    bare = TextNode(text=f"## {TITLE}\n\n{BODY}")
    (out,) = CriterialReframer()([bare])
    assert out.text.startswith("## 교량 고정식 점검시설 구조기준\n\n")
    assert out.metadata == {
        "original_section_title": TITLE,
        "reframed_criteria": ["구조기준"],
    }


def test_header_not_matching_title_is_left_alone() -> None:
    n = TextNode(text=f"## 다른 제목\n\n{BODY}", metadata={"section_title": TITLE})
    (out,) = CriterialReframer()([n])
    assert out.metadata["section_title"] == "교량 고정식 점검시설 구조기준"
    assert out.text == n.text
    (out2,) = CriterialReframer(rewrite_text_header=False)([node()])
    assert out2.text == node().text


def test_inputs_untouched_and_new_objects() -> None:
    inputs = [node(), node(title="포장 설계기준")]
    snapshot = [(n.text, dict(n.metadata), list(n.excluded_embed_metadata_keys)) for n in inputs]
    out = CriterialReframer()(inputs)
    assert all(o is not i for o, i in zip(out, inputs, strict=True))
    assert all(o.metadata is not i.metadata for o, i in zip(out, inputs, strict=True))
    after = [(n.text, dict(n.metadata), list(n.excluded_embed_metadata_keys)) for n in inputs]
    assert after == snapshot


@pytest.mark.parametrize("kwargs", [{}, {"form": "cfp"}, {"mode": "all"}, {"mode": "oracle"}])
def test_idempotent(kwargs: dict[str, object]) -> None:
    reframer = CriterialReframer(**kwargs)  # type: ignore[arg-type]
    once = reframer([node(oracle_criterion="배수기준"), node(title="포장 설계기준")])
    twice = reframer(once)
    assert [n.text for n in twice] == [n.text for n in once]
    assert [n.metadata for n in twice] == [n.metadata for n in once]
    assert [n.excluded_embed_metadata_keys for n in twice] == [
        n.excluded_embed_metadata_keys for n in once
    ]


def test_embedding_dropped_when_text_changes() -> None:
    n = node()
    n.embedding = [0.1, 0.2]
    (out,) = CriterialReframer()([n])
    assert out.embedding is None
    (same,) = CriterialReframer()([node(title="포장 설계기준")])
    assert same.embedding is None  # untouched nodes keep theirs (None here)


async def test_acall_matches_call() -> None:
    reframer = CriterialReframer(mode="most_frequent")
    sync = reframer([node()])
    asynchronous = await reframer.acall([node()])
    assert [n.text for n in asynchronous] == [n.text for n in sync]


def test_pipeline_hash_reflects_every_option() -> None:
    nodes = [node()]
    configs = [
        CriterialReframer(),
        CriterialReframer(mode="all"),
        CriterialReframer(form="cfp"),
        CriterialReframer(heads=("기준", "지침")),
        CriterialReframer(title_key="title"),
        CriterialReframer(max_criteria=2),
        CriterialReframer(frames=("plan", "mixed")),
        CriterialReframer(rewrite_text_header=False),
        CriterialReframer(mirror_title_keys=()),
        CriterialReframer(heading_path_key="path"),
    ]
    hashes = {get_transformation_hash(nodes, c) for c in configs}
    assert len(hashes) == len(configs)
    assert get_transformation_hash(nodes, CriterialReframer()) == get_transformation_hash(
        nodes, CriterialReframer()
    )


def test_in_ingestion_pipeline_and_serialisation() -> None:
    doc = Document(text=BODY, metadata={"section_title": TITLE})
    pipeline = IngestionPipeline(transformations=[CriterialReframer(form="cfp")])
    (out,) = pipeline.run(documents=[doc])
    assert out.metadata["section_title"] == f"{TITLE} 구조기준"
    again = CriterialReframer.from_dict(CriterialReframer(form="cfp").to_dict())
    assert again == CriterialReframer(form="cfp")
    out_async = asyncio.run(pipeline.arun(documents=[doc]))
    assert out_async[0].metadata["section_title"] == f"{TITLE} 구조기준"


def test_bad_options() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        CriterialReframer(mode="best")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        CriterialReframer(form="cfn")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="heads"):
        CriterialReframer(heads=())


def test_the_criterion_does_not_double_a_word_of_the_title() -> None:
    """Issue 18: ``터널 비상주차대 설치 계획`` became ``… 설치 설치기준``."""
    node = TextNode(text="## 터널 비상주차대 설치 계획\n\n비상주차대의 설치기준은 750m 이내로 한다.")
    (out,) = CriterialReframer()([node])
    assert out.text.splitlines()[0] == "## 터널 비상주차대 설치기준"
