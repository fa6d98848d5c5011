"""``--update`` of a store-backed folder killed at random instants (issue 20, item 5).

A child process updates one index folder (Qdrant kept inside it, offline USE embedding) over
and over, alternating the source between two states; the parent SIGKILLs it at a random
instant of an update, 20 times. After every kill the folder must load and its channels must
agree: every node BM25 knows has its vector in the store, the dense channel returns only
those nodes, and the folder is one of the two source states. A final update that runs to the
end must leave the store holding exactly the folder's nodes: whatever a killed update added
or meant to delete is gone (oracle: the store's own point count and a fresh build's ids).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llama_index_car.demo.loader import DEMO_CORPUS_DIR

pytest.importorskip("llama_index.vector_stores.qdrant")

KILLS = 20
BASE = ("dg2012_tunnel.hwpx", "dg2015_rest.hwpx")
TOGGLE = ("dg2016_slope.hwpx", "dg2019_drainage.hwpx")  # state A has the first, B the second
QUESTIONS = ("터널 조명", "비탈면 경사", "배수 기준")

_CHILD = r"""
import shutil, sys, time
from pathlib import Path
from llama_index_car.folder import BuildOptions, update_index
from llama_index_car.providers import resolve_embed_model

src, idx, corpus = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
a, b = sys.argv[4], sys.argv[5]
rounds = int(sys.argv[6])
model = resolve_embed_model("use")
print("ready", flush=True)
for i in range(rounds):
    have, want = (a, b) if (src / a).exists() else (b, a)
    shutil.copy(corpus / want, src / want)
    (src / have).unlink()
    print("start", flush=True)
    t0 = time.perf_counter()
    update_index(src, idx, BuildOptions(embed_model=model))
    print("done", time.perf_counter() - t0, flush=True)
"""


def _child(src: Path, idx: Path, rounds: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(src), str(idx), str(DEMO_CORPUS_DIR), *TOGGLE,
         str(rounds)],
        stdout=subprocess.PIPE, text=True, env=env,
    )


def _check(idx: Path, model: object, states: list[set[str]]) -> dict[str, int]:
    """Load ``idx`` and check its channels agree; returns store/folder counts."""
    from llama_index_car.folder import load_index
    from llama_index_car.folder.update import PENDING_NAME
    from llama_index_car.stores import close_vector_store, fetch_embeddings

    local = load_index(idx, embed_model=model)  # type: ignore[arg-type]
    store = local.vector_index.vector_store
    try:
        ids = {n.node_id for n in local.nodes}
        vectors = fetch_embeddings(store, sorted(ids))
        assert set(vectors) == ids, "a node BM25 knows has no vector in the store"
        dense = local.as_retriever("dense", similarity_top_k=50)
        for q in QUESTIONS:
            assert {h.node.node_id for h in dense.retrieve(q)} <= ids
        files = {Path(f).name for f in local.metadata["files"]}
        assert files in states, files
        points = store.client.count(store.collection_name, exact=True).count
        garbage = sorted(local.metadata.get("store_garbage", []))
        return {"folder": len(ids), "store": int(points),
                "pending": int((idx / PENDING_NAME).exists()), "garbage": len(garbage),
                "garbage_in_store": len(fetch_embeddings(store, garbage)) if garbage else 0}
    finally:
        close_vector_store(store)


@pytest.mark.slow
def test_sigkill_during_update_never_leaves_channels_that_disagree(tmp_path: Path) -> None:
    from llama_index_car.providers import resolve_embed_model

    src, idx = tmp_path / "src", tmp_path / "idx"
    src.mkdir()
    for name in (*BASE, TOGGLE[0]):
        shutil.copy(DEMO_CORPUS_DIR / name, src / name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-m", "llama_index_car", "index", str(src), "--persist",
                    str(idx), "--embed", "use", "--store", "qdrant", "--no-progress"],
                   check=True, env=env, capture_output=True)  # its own process: Qdrant
    # local is one client per folder, and this process opens it between the kills
    states = [set(BASE) | {t} for t in TOGGLE]
    model = resolve_embed_model("use")

    # embed both states once (later updates hit the embedding cache), then time the first
    # update of a fresh process: the writes come at its end, so the kills aim there
    for rounds in (2, 1):
        proc = _child(src, idx, rounds=rounds)
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0
    first = float(out.split("done")[1].split()[0])

    rng = random.Random(20)
    seen: list[dict[str, int]] = []
    for _ in range(KILLS):
        proc = _child(src, idx, rounds=1000)
        assert proc.stdout is not None
        while proc.stdout.readline().strip() != "start":
            pass
        time.sleep(rng.uniform(0.1, 1.2) * first)  # mostly inside the writes
        proc.kill()
        proc.wait(timeout=60)
        seen.append(_check(idx, model, states))

    proc = _child(src, idx, rounds=2)  # two complete updates: every leftover is cleaned
    proc.communicate(timeout=600)
    assert proc.returncode == 0
    final = _check(idx, model, states)
    # the manifest still names what the last update removed; the store no longer holds it
    assert final["store"] == final["folder"] and final["pending"] == 0, final
    assert final["garbage_in_store"] == 0, final
    print(json.dumps({"kills": len(seen), "store_differed": sum(
        s["store"] != s["folder"] for s in seen), "pending_left": sum(
        s["pending"] for s in seen)}))
