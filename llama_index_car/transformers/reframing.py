"""Criterial reframing (paper §4.6, §5.4): surface a body criterion in the indexed header.

For a node whose section title is plan-framed (``…확충방안``) and whose body states a
criterion compound absent from the title (``설치기준``), rewrite the header the embedding sees:
``cf`` form (plan tokens removed + criterion, the paper's choice) or ``cfp`` (plan title +
criterion). Both the metadata title and a leading ``## {title}`` line of the node text (what
``HWPXNodeParser`` writes) are rewritten; the original title is kept under
``original_title_key`` (excluded from the embedding text) and the applied criteria under
``"reframed_criteria"``; the last element of ``heading_path`` is rewritten when it is the
title, and so is any ``mirror_title_keys`` value equal to it (the reader's document
``title`` of a one-section file), so the plan framing does not leak back into the embedded
metadata.

The paper's evidence: with the *queried* criterion (``mode="oracle"``) the target's mean rank
drops 254.8 → 4.6 and no case worsens; the query-independent modes (``first``, ``all``,
``most_frequent``) did **not** transfer to end-to-end QA — the index cannot know which
criterion a query will seek. Prefer query-time ``CriterionAwareRetriever`` for that.

>>> from llama_index.core.schema import TextNode
>>> node = TextNode(text="## 점검시설 확충방안\\n\\n점검시설의 설치기준은 다음과 같다.",
...                 metadata={"section_title": "점검시설 확충방안"})
>>> (out,) = CriterialReframer()([node])
>>> out.metadata["section_title"], out.text.splitlines()[0]
('점검시설 설치기준', '## 점검시설 설치기준')
>>> out.metadata["original_section_title"]
'점검시설 확충방안'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from llama_index.core.bridge.pydantic import Field, field_validator
from llama_index.core.schema import BaseNode, MetadataMode, Node, TextNode, TransformComponent

from llama_index_car.framing import (
    DEFAULT_CRITERION_HEADS,
    classify_title,
    criterion_frequencies,
    reframe_title,
)

_HEADER = "## "


def _split_header(text: str) -> tuple[str | None, str]:
    """``("title", body)`` when ``text`` starts with a ``## title`` line, else ``(None, text)``."""
    if not text.startswith(_HEADER):
        return None, text
    first, _, rest = text.partition("\n")
    return first[len(_HEADER) :].strip(), rest.lstrip("\n")


class CriterialReframer(TransformComponent):
    """Rewrite plan-framed section headers to surface the body's criterion (a TransformComponent).

    Every option is a pydantic field, so ``IngestionPipeline``'s transformation hash changes
    with the configuration. The transform is pure: it returns new nodes and leaves its input
    untouched; applying it twice changes nothing more (nodes carrying ``original_title_key``
    are left as they are). Only titles whose :func:`~llama_index_car.framing.classify_title`
    is in ``frames`` (default: ``plan``) are rewritten.

    By default (``scope="section"``) criteria are mined from the whole section — the chunks
    of one section (same ``ref_doc_id``, ``section``, heading path and title, as
    ``HWPXNodeParser`` emits them) share one reframed header even when only one chunk states
    the criterion; ``scope="node"`` looks at each node alone.

    Modes: ``first`` body criterion (the paper's extractor); ``all`` criteria (at most
    ``max_criteria``, body order); ``most_frequent`` (ties → earlier in the body);
    ``oracle`` — the criterion stored per node under ``criterion_key`` (a string or a list),
    for evaluations.

    >>> CriterialReframer(mode="most_frequent", form="cfp").form
    'cfp'
    """

    mode: Literal["first", "all", "most_frequent", "oracle"] = Field(
        default="first", description="Which criterion to surface: first/all/most_frequent/oracle."
    )
    form: Literal["cf", "cfp"] = Field(
        default="cf",
        description="cf: plan tokens removed + criterion; cfp: plan title + criterion.",
    )
    title_key: str = Field(default="section_title", description="Metadata key of the title.")
    original_title_key: str = Field(
        default="original_section_title",
        description="Metadata key receiving the original title (excluded from embeddings).",
    )
    criteria_key: str = Field(
        default="reframed_criteria",
        description="Metadata key receiving the surfaced criteria (excluded from embed/LLM).",
    )
    criterion_key: str = Field(
        default="oracle_criterion", description="Metadata key read by mode='oracle'."
    )
    heads: tuple[str, ...] = Field(
        default=DEFAULT_CRITERION_HEADS, description="Heads of criterion compounds (~기준)."
    )
    frames: tuple[Literal["plan", "mixed", "standard", "neither"], ...] = Field(
        default=("plan",), description="Title frames that get reframed (paper: plan only)."
    )
    heading_path_key: str = Field(
        default="heading_path",
        description="Metadata key of the heading path (' > '-joined string or list) whose "
        "last element, when equal to the title, is rewritten too.",
    )
    mirror_title_keys: tuple[str, ...] = Field(
        default=("title",),
        description="Other metadata keys (e.g. the reader's document 'title') rewritten too "
        "when their value equals the section title, so the plan framing does not leak back.",
    )
    max_criteria: int = Field(default=3, ge=1, description="Cap on criteria for mode='all'.")
    scope: Literal["section", "node"] = Field(
        default="section",
        description="Where criteria are mined: the whole section (all chunks of one section "
        "share a header; grouped by ref_doc_id, 'section', heading path and title) or each "
        "node alone.",
    )
    rewrite_text_header: bool = Field(
        default=True, description="Also rewrite a leading '## {title}' line of the node text."
    )

    @field_validator("heads")
    @classmethod
    def _check_heads(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or any(not isinstance(h, str) or not h.strip() for h in value):
            raise ValueError(f"heads={value!r} must be non-empty strings, e.g. ('기준',)")
        return value

    @classmethod
    def class_name(cls) -> str:
        return "CriterialReframer"

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        """Return reframed copies of ``nodes`` (same order, same ids)."""
        copies = [node.model_copy(deep=True) for node in nodes]
        plans = [self._plan(node) for node in copies]
        section_bodies: dict[tuple[Any, ...], list[str]] = {}
        for plan in plans:
            if plan is not None:
                section_bodies.setdefault(plan[0], []).append(plan[3])
        for node, plan in zip(copies, plans, strict=True):
            if plan is None:
                continue
            key, title, header_title, body = plan
            scope_body = body if self.scope == "node" else "\n".join(section_bodies[key])
            criteria = self._choose(node, scope_body, title)
            if criteria:
                self._apply(node, title, header_title, body, criteria)
        return copies

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        """Async form (pure string work: runs inline)."""
        return self.__call__(nodes, **kwargs)

    # ------------------------------------------------------------------------ internals
    def _choose(self, node: BaseNode, body: str, title: str) -> list[str]:
        if self.mode == "oracle":
            raw = node.metadata.get(self.criterion_key)
            given = [raw] if isinstance(raw, str) else list(raw or [])
            compact = "".join(title.split())
            return [c.strip() for c in given if c.strip() and "".join(c.split()) not in compact]
        counts = criterion_frequencies(body, title=title, heads=self.heads)
        if not counts:
            return []
        if self.mode == "first":
            return [next(iter(counts))]
        if self.mode == "all":
            return list(counts)[: self.max_criteria]
        best = max(counts.values())
        return [next(c for c, n in counts.items() if n == best)]

    def _rewrite_heading_path(self, node: BaseNode, title: str, reframed: str) -> None:
        path = node.metadata.get(self.heading_path_key)
        norm = " ".join(title.split())
        if isinstance(path, str):
            parts = path.split(" > ")
            if parts and " ".join(parts[-1].split()) == norm:
                node.metadata[self.heading_path_key] = " > ".join([*parts[:-1], reframed])
        elif isinstance(path, list) and path and " ".join(str(path[-1]).split()) == norm:
            node.metadata[self.heading_path_key] = [*path[:-1], reframed]

    def _section_key(self, node: BaseNode, title: str) -> tuple[Any, ...]:
        if self.scope == "node" or node.ref_doc_id is None:
            return ("node", node.node_id)
        return (
            node.ref_doc_id,
            str(node.metadata.get("section", "")),
            str(node.metadata.get(self.heading_path_key, "")),
            " ".join(title.split()),
        )

    def _plan(self, node: BaseNode) -> tuple[tuple[Any, ...], str, str | None, str] | None:
        """``(section key, title, header title, body)`` for a reframing candidate, else None."""
        if not isinstance(node, (TextNode, Node)) or self.original_title_key in node.metadata:
            return None
        header_title, body = _split_header(node.get_content(metadata_mode=MetadataMode.NONE))
        meta_title = node.metadata.get(self.title_key)
        title = meta_title if isinstance(meta_title, str) and meta_title.strip() else header_title
        if not title or classify_title(title) not in self.frames:
            return None
        return self._section_key(node, title), title, header_title, body

    def _apply(
        self, new: BaseNode, title: str, header_title: str | None, body: str, criteria: list[str]
    ) -> None:
        meta_title = new.metadata.get(self.title_key)
        reframed = reframe_title(title, " ".join(criteria), self.form)
        if isinstance(meta_title, str) and meta_title.strip():
            new.metadata[self.title_key] = reframed
        if (
            self.rewrite_text_header
            and header_title is not None
            and " ".join(header_title.split()) == " ".join(title.split())
        ):
            new.set_content(f"{_HEADER}{reframed}\n\n{body}")
        self._rewrite_heading_path(new, title, reframed)
        norm = " ".join(title.split())
        for key in self.mirror_title_keys:
            value = new.metadata.get(key)
            if key != self.title_key and isinstance(value, str) and " ".join(value.split()) == norm:
                new.metadata[key] = reframed
        new.metadata[self.original_title_key] = title
        new.metadata[self.criteria_key] = criteria
        for key, lists in (
            (self.original_title_key, (new.excluded_embed_metadata_keys,)),
            (
                self.criteria_key,
                (new.excluded_embed_metadata_keys, new.excluded_llm_metadata_keys),
            ),
        ):
            for excluded in lists:
                if key not in excluded:
                    excluded.append(key)
        new.embedding = None
