"""``llama-car serve DIR --ray --replicas N``: the same ASGI app on Ray Serve.

Each replica is a Ray actor that opens the folder itself (a :class:`FolderEngine`; the BM25
arrays are memory-mapped, so replicas on one machine share their pages) and builds the app
with :func:`create_app` at replica start (``serve.ingress()`` deferred to
``__serve_build_asgi_app__``); Ray Serve's proxy binds ``--host``/``--port`` and spreads
requests over the replicas. Every replica follows the folder's generations on its own, so a
response still names the generation that served it. SIGTERM/SIGINT shuts Serve down (replicas
finish their requests within Serve's graceful shutdown) and stops the local cluster.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any


def deployment(folder: str, *, store: str | None, llm: str, llm_timeout: float,
               settings: Any, replicas: int) -> Any:
    """The bound Ray Serve application: ``replicas`` replicas of the app over ``folder``."""
    from ray import serve

    @serve.ingress()
    class LlamaCarReplica:
        """One replica: the folder opened and warmed, then the ASGI app over it."""

        def __init__(self, folder: str, store: str | None, llm: str, llm_timeout: float,
                     settings: Any) -> None:
            from llama_index_car.providers import resolve_llm
            from llama_index_car.serve._engine import FolderEngine

            self.engine = FolderEngine(folder, store=store,
                                       llm=resolve_llm(llm, timeout=llm_timeout),
                                       llm_timeout=llm_timeout)
            self.engine.open()
            self.settings = settings

        def __serve_build_asgi_app__(self) -> Any:
            from llama_index_car.serve.app import create_app

            return create_app(self.engine, self.settings)

    app: Any = serve.deployment(
        LlamaCarReplica, name="llama-car", num_replicas=replicas,
        ray_actor_options={"num_cpus": 1},
        max_ongoing_requests=max(8, 4 * settings.threads),
        graceful_shutdown_timeout_s=settings.deadline + llm_timeout + 5,
    )
    return app.bind(folder, store, llm, llm_timeout, settings)


def serve_on_ray(args: argparse.Namespace, settings: Any) -> int:
    """Start (or join) Ray, deploy, wait until SIGTERM/SIGINT, shut down."""
    import ray
    from ray import serve

    replicas = args.replicas or 1
    started = time.perf_counter()
    if not ray.is_initialized():
        if args.ray_address:
            ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(num_cpus=max(replicas, 2), include_dashboard=False, log_to_driver=False)
    stop = threading.Event()

    def trap() -> None:  # Ray installs its own handlers (an abort on SIGTERM) at init
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())

    trap()
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(deployment(str(args.persist_dir), store=args.store, llm=args.llm,
                             llm_timeout=float(args.llm_timeout), settings=settings,
                             replicas=replicas),
                  name="llama-car", route_prefix="/", blocking=False)
        trap()  # again: deploying may have set handlers of its own
        print(f"llama-car serve: {args.persist_dir} on Ray Serve, {replicas} replicas, "
              f"http://{args.host}:{args.port}/, ready in {time.perf_counter() - started:.1f} s",
              file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0
