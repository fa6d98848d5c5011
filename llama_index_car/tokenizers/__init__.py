"""Package: see the modules inside; re-exports only."""
