"""``llama-car serve``: one long-lived process over an index folder (``[serve]`` extra).

:class:`FolderEngine` opens the folder once, follows its generations and answers retrievals,
cited answers and node views; :func:`create_app` is the ASGI application (FastAPI) over it,
with the page at ``/``. See ``docs/SERVE.md``.
"""

from llama_index_car.serve._engine import FolderEngine
from llama_index_car.serve.app import ServeSettings, create_app

__all__ = ["FolderEngine", "ServeSettings", "create_app"]
