"""``SpanCitationQueryEngine``: answers whose ``[n]`` cite criterion spans by coordinates.

LlamaIndex's ``CitationQueryEngine`` numbers its sources by re-chunking each hit's text (512
tokens), so a citation points at a chunk and the table coordinates of the reader (``cells``)
are lost. This engine keeps the pattern — numbered sources in the prompt, ``[n]`` in the
answer, the sources as ``response.source_nodes`` — but its sources are the **criterion spans**
the retriever attached (``metadata["criterion_spans"]``, see
:class:`~llama_index_car.postprocessors.criterion_spans.CriterionSpanPostprocessor`): one
sentence, table row or table cell each, numbered in hit order then span order (best first),
at most ``max_sources``. A hit without spans is one source of kind ``section`` (its text, cut
at :data:`SECTION_SOURCE_CHARS`). Each source is shown to the LLM as::

    Source 2 (dg2016_slope.hwpx · 측구 설치기준 · table 0, row 1, col 2):
    노측 측구 · U형 — 적용 구간: 깎기부, 집수면적 1ha 이상

(coordinates 0-based, as the reader's ``node_cells()``; a cell reads ``row header — column
header: value``). The response carries

* ``source_nodes``: one ``NodeWithScore`` per source, ``source_nodes[n - 1]`` is source ``n``;
  its metadata holds ``source_number``, ``kind``, ``file_name``, ``section_title``,
  ``parent_node_id``, ``span_start``/``span_end`` (offsets into the parent node's text),
  ``table_index``, ``row``, ``col``, ``row_span``, ``col_span``, ``header``, ``row_header``
  (``None`` where not applicable), all excluded from embed and LLM metadata (the location is in
  the text already); a ``PARENT`` relationship names the hit's node;
* ``metadata["citations"]``: the :class:`Citation` of each source the answer cites, in order of
  first citation. ``[n]`` outside ``1..len(sources)`` (``[0]``, ``[-1]``, ``[1234567]``) is
  ignored and listed in ``metadata["invalid_citations"]`` as the integer given (the first
  :data:`MAX_INVALID_CITATIONS`, also when the answer is replaced): LLM output is untrusted.
  ``[1, 3]`` and ``[2-4]`` are read as lists and ranges;
* ``metadata["fallback"]``/``["error"]``/``["error_message"]``: when the LLM call fails (any
  ``Exception``: HTTP errors, timeouts, deadlines, unparseable replies) the answer is the
  **retrieval-only answer** — the top ``fallback_sources`` sources, each cited ``[n]`` — with
  ``fallback=True`` and the error's class name, instead of an exception. With
  ``require_citation`` (default) an answer citing no valid source is replaced the same way
  (``error="UncitedAnswerError"``). A stream that breaks off (or ends uncited) gets the
  retrieval-only answer appended. No hits: :data:`NO_SOURCE_ANSWER`, without an LLM call.

The answer is LLM output, so untrusted: it is returned sanitised as ``llama-car query`` prints
(:func:`~llama_index_car.hypothesizers.base.sanitize_text`: terminal escape sequences,
control, bidi and other format characters and lone surrogates removed, newlines and tabs
kept) and cut after ``max_answer_chars`` characters (default
:data:`DEFAULT_MAX_ANSWER_CHARS`, the cut marked ``…``); citations are read from that text. A stream is sanitised token by token (an
escape sequence split across tokens is held back until it is whole) and stops reading the LLM
at the cut.

The LLM is called once per query through LlamaIndex's interface (``predict``/``stream`` and
their async twins, as the response synthesizers do); ``llm_timeout`` opens an
:func:`~llama_index_car.llms.deadline.llm_deadline` around it (bounded clients such as
:class:`~llama_index_car.llms.BoundedAnthropic` honour it; other LLMs rely on their own
``timeout``). With ``streaming=True``, ``query`` returns a ``StreamingResponse`` (``aquery``: an
``AsyncStreamingResponse``) whose ``source_nodes`` are set at once and whose citations are set
once the stream is consumed.

>>> cited_numbers("폭은 3.5m [2], 속도는 [1, 9] 및 [2-3], [-1]", n_sources=3)
([2, 1, 3], [9, -1])
>>> c = Citation(number=1, kind="cell", text="750m 이내", node_id="n1", file="t.hwpx",
...              section_title="비상주차대", table_index=0, row=1, col=1, header="기준",
...              row_header="설치 간격")
>>> print(render_source(c))
Source 1 (t.hwpx · 비상주차대 · table 0, row 1, col 1):
설치 간격 — 기준: 750m 이내
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Sequence
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.llms.llm import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import (
    NodeWithScore,
    QueryBundle,
)

from llama_index_car._errors import ConfigurationError
from llama_index_car.hypothesizers.base import sanitize_text, trailing_escape_start
from llama_index_car.llms.deadline import llm_deadline
from llama_index_car.query_engines._citations import (
    CITATIONS_KEY,
    CUT,
    DEFAULT_FALLBACK_SOURCES,
    DEFAULT_MAX_ANSWER_CHARS,
    DEFAULT_MAX_SOURCES,
    MAX_INVALID_CITATIONS,
    MAX_PENDING,
    NO_SOURCE_ANSWER,
    SPAN_CITATION_QA_TEMPLATE,
    Citation,
    UncitedAnswerError,
    cited_numbers,
    clean_answer,
    render_source,
    retrieval_only_answer,
    source_node,
    sources_from_hits,
)


class _Answer:
    """One answer being finished: the sources, the response metadata it fills in, and the
    text so far (streams feed it token by token), sanitised and bounded as it comes."""

    def __init__(
        self, sources: list[Citation], fallback_sources: int, require: bool, max_chars: int
    ) -> None:
        self.sources = sources
        self.k = fallback_sources
        self.require = require
        self.max_chars = max_chars
        self.parts: list[str] = []
        self.length = 0  # characters of the LLM's text kept so far
        self.cut = False  # the LLM's text reached max_chars
        self.pending = ""  # a stream's trailing escape sequence, held back
        self.metadata: dict[str, Any] = {
            CITATIONS_KEY: [], "fallback": False, "error": None, "error_message": None,
            "invalid_citations": [],
        }

    def feed(self, token: Any) -> str:
        """A stream's next token, sanitised, up to the cut (then "" and ``cut`` is set)."""
        if self.cut:
            return ""
        room = self.max_chars - self.length
        text = self.pending + str(token)[: 4 * room + MAX_PENDING]
        keep = trailing_escape_start(text, MAX_PENDING)
        self.pending = text[keep:]
        clean = sanitize_text(text[:keep], keep_newlines=True)
        if len(clean) > room:
            clean = clean[:room] + CUT
            self.cut = True
            self.pending = ""
        self.length += len(clean) - self.cut
        return clean

    def flush(self) -> str:
        """What a stream held back at its end, sanitised (an unfinished escape sequence
        goes)."""
        rest, self.pending = self.pending, ""
        return self.feed(rest) if rest else ""

    def fail(self, exc: BaseException) -> str:
        """Record ``exc`` and return the retrieval-only text to add to the answer."""
        message = sanitize_text(str(exc)[:500]).strip()
        self.metadata.update(fallback=True, error=type(exc).__name__, error_message=message or None)
        text = retrieval_only_answer(self.sources, self.k, type(exc).__name__)
        text = sanitize_text(text, keep_newlines=True)  # sources are index text
        return f"\n\n{text}" if "".join(self.parts).strip() else text

    def finish(self, replace: bool = False) -> str:
        """Resolve the citations of the text so far; return text still to add ("" or the
        retrieval-only answer when nothing valid was cited and a citation is required; with
        ``replace`` it replaces the text instead of following it). Invalid numbers the LLM's
        text cited stay listed when it is replaced."""
        tail = ""
        cited, invalid = cited_numbers("".join(self.parts), len(self.sources))
        if not cited and self.require and not self.metadata["fallback"]:
            if replace:
                self.parts = []
            tail = self.fail(UncitedAnswerError("the LLM answer cites no source"))
            self.parts.append(tail)
            cited, more = cited_numbers("".join(self.parts), len(self.sources))
            invalid += [n for n in more if n not in invalid][: MAX_INVALID_CITATIONS - len(invalid)]
        self.metadata[CITATIONS_KEY] = [self.sources[n - 1] for n in cited]
        self.metadata["invalid_citations"] = invalid
        return tail

    def whole(self, text: str | None = None, exc: BaseException | None = None) -> str:
        """The complete answer from an LLM ``text`` or a failure ``exc``."""
        if exc is not None:
            self.parts = [self.fail(exc)]
        else:
            self.parts = [clean_answer(str(text or ""), self.max_chars)]
        self.finish(replace=True)
        return "".join(self.parts)

    def _take(self, token: Any) -> str:
        piece = self.feed(token)
        if piece:
            self.parts.append(piece)
        return piece

    def tokens(self, gen: Iterator[str]) -> Generator[str, None, None]:
        try:
            for token in gen:
                if piece := self._take(token):
                    yield piece
                if self.cut:
                    break
            if piece := self._take_rest():
                yield piece
        except Exception as exc:  # noqa: BLE001 - a broken stream gets the fallback
            tail = self.fail(exc)
            self.parts.append(tail)
            yield tail
        finally:
            if self.cut:
                _close(gen)
        tail = self.finish()
        if tail:
            yield tail

    async def atokens(self, gen: AsyncIterator[str]) -> AsyncGenerator[str, None]:
        try:
            async for token in gen:
                if piece := self._take(token):
                    yield piece
                if self.cut:
                    break
            if piece := self._take_rest():
                yield piece
        except Exception as exc:  # noqa: BLE001 - a broken stream gets the fallback
            tail = self.fail(exc)
            self.parts.append(tail)
            yield tail
        finally:
            if self.cut:
                await _aclose(gen)
        tail = self.finish()
        if tail:
            yield tail

    def _take_rest(self) -> str:
        piece = self.flush()
        if piece:
            self.parts.append(piece)
        return piece


def _close(gen: Any) -> None:
    """Stop reading a stream cut at ``max_answer_chars`` (its connection is released)."""
    close = getattr(gen, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # noqa: BLE001, S110 - the answer is complete; nothing to report
            pass


async def _aclose(gen: Any) -> None:
    aclose = getattr(gen, "aclose", None)
    if callable(aclose):
        try:
            await aclose()
        except Exception:  # noqa: BLE001, S110 - the answer is complete; nothing to report
            pass


def _one(text: str) -> Generator[str, None, None]:
    yield text


async def _aone(text: str) -> AsyncGenerator[str, None]:
    yield text


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name}={value!r} must be an integer >= 1")
    return value


# ----------------------------------------------------------------------------- engine
class SpanCitationQueryEngine(BaseQueryEngine):
    """A query engine whose numbered sources are the hits' criterion spans (module docstring).

    Args:
        retriever: any retriever; its hits should carry ``criterion_spans`` (CAR over a span
            index attaches them; for others add a
            :class:`~llama_index_car.postprocessors.criterion_spans.CriterionSpanPostprocessor`
            to ``node_postprocessors``).
        llm: the LlamaIndex LLM that writes the answer (required; ``Settings.llm`` is not read).
        node_postprocessors: applied to the hits in order, before the sources are numbered.
        citation_qa_template: the prompt (``context_str``, ``query_str``); default
            :data:`SPAN_CITATION_QA_TEMPLATE`; also settable through ``update_prompts``.
        streaming: ``query`` returns a ``StreamingResponse`` (``aquery`` an
            ``AsyncStreamingResponse``).
        max_sources: sources shown to the LLM (default 15).
        fallback_sources: sources cited by the retrieval-only answer (default 3).
        require_citation: replace an answer citing no valid source by the retrieval-only
            answer (default ``True``).
        llm_timeout: seconds for the LLM call, as an :func:`llm_deadline` (default ``None``:
            the LLM's own timeouts).
        max_answer_chars: characters of the LLM's answer kept, sanitised (default 20,000;
            the cut is marked ``…``, and a stream stops being read there).
        callback_manager: LlamaIndex callbacks (default: a new, empty manager).

    Raises:
        ConfigurationError: a non-retriever, a non-LLM, or a count below 1.
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        llm: LLM,
        *,
        node_postprocessors: Sequence[BaseNodePostprocessor] | None = None,
        citation_qa_template: BasePromptTemplate | None = None,
        streaming: bool = False,
        max_sources: int = DEFAULT_MAX_SOURCES,
        fallback_sources: int = DEFAULT_FALLBACK_SOURCES,
        require_citation: bool = True,
        llm_timeout: float | None = None,
        max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if not isinstance(retriever, BaseRetriever):
            raise ConfigurationError(
                f"retriever must be a LlamaIndex BaseRetriever, not {type(retriever).__name__}"
            )
        if not isinstance(llm, LLM):
            raise ConfigurationError(
                f"llm must be a LlamaIndex LLM (e.g. BoundedAnthropic), not {type(llm).__name__}"
            )
        with llm_deadline(llm_timeout):  # validates llm_timeout (ConfigurationError)
            pass
        self._retriever = retriever
        self._llm = llm
        self._node_postprocessors = list(node_postprocessors or [])
        self._qa_template = citation_qa_template or SPAN_CITATION_QA_TEMPLATE
        self._streaming = bool(streaming)
        self.max_sources = _positive_int("max_sources", max_sources)
        self.fallback_sources = _positive_int("fallback_sources", fallback_sources)
        self.require_citation = bool(require_citation)
        self.max_answer_chars = _positive_int("max_answer_chars", max_answer_chars)
        self.llm_timeout = llm_timeout
        super().__init__(callback_manager=callback_manager)
        for post in self._node_postprocessors:
            post.callback_manager = self.callback_manager

    @property
    def retriever(self) -> BaseRetriever:
        """The retriever."""
        return self._retriever

    # prompts ------------------------------------------------------------------
    def _get_prompts(self) -> dict[str, Any]:
        return {"citation_qa_template": self._qa_template}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "citation_qa_template" in prompts:
            self._qa_template = prompts["citation_qa_template"]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    # retrieval ----------------------------------------------------------------
    def retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """The retriever's hits after the node postprocessors."""
        nodes = self._retriever.retrieve(query_bundle)
        for post in self._node_postprocessors:
            nodes = post.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    async def aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Async :meth:`retrieve`."""
        nodes = await self._retriever.aretrieve(query_bundle)
        for post in self._node_postprocessors:
            nodes = await post.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    # synthesis ----------------------------------------------------------------
    def _prepare(
        self, nodes: Sequence[NodeWithScore]
    ) -> tuple[_Answer, list[NodeWithScore], dict[str, str]]:
        sources = sources_from_hits(nodes, self.max_sources)
        answer = _Answer(
            sources, self.fallback_sources, self.require_citation, self.max_answer_chars
        )
        context = "\n\n".join(render_source(c) for c in sources)
        return answer, [source_node(c) for c in sources], {"context_str": context}

    def synthesize(
        self,
        query_bundle: QueryBundle,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
    ) -> RESPONSE_TYPE:
        """Number the spans of ``nodes`` and answer ``query_bundle`` citing them."""
        answer, sources, args = self._prepare(nodes)
        args["query_str"] = query_bundle.query_str
        extra = list(additional_source_nodes or [])
        if not answer.sources:
            return self._no_source(answer, extra)
        if self._streaming:
            try:
                with llm_deadline(self.llm_timeout):
                    gen = self._llm.stream(self._qa_template, **args)
            except Exception as exc:  # noqa: BLE001 - any LLM failure: the retrieval-only answer
                return StreamingResponse(_one(answer.whole(exc=exc)), sources + extra,
                                         answer.metadata)
            return StreamingResponse(answer.tokens(gen), sources + extra, answer.metadata)
        try:
            with llm_deadline(self.llm_timeout):
                text = self._llm.predict(self._qa_template, **args)
        except Exception as exc:  # noqa: BLE001 - any LLM failure: the retrieval-only answer
            return Response(answer.whole(exc=exc), sources + extra, answer.metadata)
        return Response(answer.whole(text), sources + extra, answer.metadata)

    async def asynthesize(
        self,
        query_bundle: QueryBundle,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
    ) -> RESPONSE_TYPE:
        """Async :meth:`synthesize` (``apredict``/``astream``)."""
        answer, sources, args = self._prepare(nodes)
        args["query_str"] = query_bundle.query_str
        extra = list(additional_source_nodes or [])
        if not answer.sources:
            no = self._no_source(answer, extra)
            if self._streaming:
                return AsyncStreamingResponse(_aone(NO_SOURCE_ANSWER), no.source_nodes,
                                              no.metadata)
            return no
        if self._streaming:
            try:
                with llm_deadline(self.llm_timeout):
                    agen = await self._llm.astream(self._qa_template, **args)
            except Exception as exc:  # noqa: BLE001 - any LLM failure: the retrieval-only answer
                return AsyncStreamingResponse(_aone(answer.whole(exc=exc)), sources + extra,
                                              answer.metadata)
            return AsyncStreamingResponse(answer.atokens(agen), sources + extra,
                                          answer.metadata)
        try:
            with llm_deadline(self.llm_timeout):
                text = await self._llm.apredict(self._qa_template, **args)
        except Exception as exc:  # noqa: BLE001 - any LLM failure: the retrieval-only answer
            return Response(answer.whole(exc=exc), sources + extra, answer.metadata)
        return Response(answer.whole(text), sources + extra, answer.metadata)

    def _no_source(self, answer: _Answer, extra: list[NodeWithScore]) -> Any:
        answer.metadata["no_source"] = True
        if self._streaming:
            return StreamingResponse(_one(NO_SOURCE_ANSWER), extra, answer.metadata)
        return Response(NO_SOURCE_ANSWER, extra, answer.metadata)

    # queries ------------------------------------------------------------------
    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with self.callback_manager.event(
            CBEventType.RETRIEVE, payload={EventPayload.QUERY_STR: query_bundle.query_str}
        ) as event:
            nodes = self.retrieve(query_bundle)
            event.on_end(payload={EventPayload.NODES: nodes})
        return self.synthesize(query_bundle, nodes)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with self.callback_manager.event(
            CBEventType.RETRIEVE, payload={EventPayload.QUERY_STR: query_bundle.query_str}
        ) as event:
            nodes = await self.aretrieve(query_bundle)
            event.on_end(payload={EventPayload.NODES: nodes})
        return await self.asynthesize(query_bundle, nodes)

    # chat ---------------------------------------------------------------------
    def as_chat_engine(self, llm: LLM | None = None, **kwargs: Any) -> Any:
        """A ``CondenseQuestionChatEngine`` over this engine: each turn is condensed into a
        standalone question (by ``llm``, default this engine's) and answered here, so
        ``chat(...).sources[0].raw_output.metadata["citations"]`` holds the turn's citations.
        ``kwargs`` go to ``CondenseQuestionChatEngine.from_defaults`` (``chat_history`` …)."""
        from llama_index.core.chat_engine import CondenseQuestionChatEngine

        return CondenseQuestionChatEngine.from_defaults(
            query_engine=self, llm=llm or self._llm, **kwargs
        )
