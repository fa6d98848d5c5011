"""Fakes and fixtures' data used by the tests: a provider HTTP server (``provider_server``), a
base for model-free embeddings (``embeddings``) and small standard-like texts (``corpus``)."""
