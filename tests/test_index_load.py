"""The index folder's vector store is read with ``json`` (fast path) exactly as LlamaIndex's
own ``SimpleVectorStore.from_persist_path`` reads it, and damage is a typed error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.simple import SimpleVectorStore

from llama_index_car.pipeline import _load_storage
from tests.fakes.embeddings import VecEmbedding


class CharSum(VecEmbedding):
    def _vec(self, text: str) -> list[float]:
        return [float(sum(map(ord, text)) % 97) + 0.25, float(len(text)), 1.5]


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    nodes = [
        TextNode(id_=f"n{i}", text=f"본문 {i} 설치기준", metadata={"file_name": f"f{i % 2}.hwpx"},
                 excluded_embed_metadata_keys=["file_name"])
        for i in range(5)
    ]
    index = VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(),
                             embed_model=CharSum())
    index.storage_context.persist(persist_dir=str(tmp_path))
    return tmp_path


def test_fast_load_equals_llamaindex_loader(folder: Path) -> None:
    storage = _load_storage(folder)
    reference = SimpleVectorStore.from_persist_path(str(folder / "default__vector_store.json"))
    assert storage.vector_store.data.embedding_dict == reference.data.embedding_dict
    assert storage.vector_store.data.text_id_to_ref_doc_id == (
        reference.data.text_id_to_ref_doc_id
    )
    assert sorted(storage.docstore.docs) == [f"n{i}" for i in range(5)]
    assert storage.vector_store.data.embedding_dict["n0"] == CharSum()._vec("본문 0 설치기준")


@pytest.mark.parametrize(
    "payload",
    ['{"embedding_dict": [1, 2]}', '{"embedding_dict": {"n0": ["x"]}}', "[]", "{not json"],
)
def test_damaged_vector_store_is_a_value_error(folder: Path, payload: str) -> None:
    (folder / "default__vector_store.json").write_text(payload, encoding="utf-8")
    with pytest.raises(ValueError):
        _load_storage(folder)


def test_missing_vector_store_is_an_os_error(folder: Path) -> None:
    (folder / "default__vector_store.json").unlink()
    with pytest.raises(OSError):
        _load_storage(folder)
    assert json.loads((folder / "docstore.json").read_text(encoding="utf-8"))
