"""Fakes used by the tests (a provider HTTP server)."""
