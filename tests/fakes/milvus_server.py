"""A real Milvus gRPC server on 127.0.0.1: milvus-lite 3.2's own server (the one pymilvus starts
for a ``.db`` path), started on a free port for a test.

``milvus_lite.adapter.grpc.server.start_server_in_thread`` opens a Milvus Lite data folder and
serves the Milvus gRPC protocol from it in this process's threads; a client reaches it as it
reaches any Milvus server, through ``milvus+http://127.0.0.1:PORT``. It does not check tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["milvus_serving"]


@contextmanager
def milvus_serving(data_dir: Path) -> Iterator[str]:
    """The store URI of a Milvus server over ``data_dir``, stopped on exit."""
    from milvus_lite.adapter.grpc.server import start_server_in_thread

    server, db, port = start_server_in_thread(str(data_dir), host="127.0.0.1", port=0)
    try:
        yield f"milvus+http://127.0.0.1:{port}"
    finally:
        server.stop(grace=0)
        db.close()
