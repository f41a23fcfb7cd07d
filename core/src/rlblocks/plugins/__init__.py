"""Plugin machinery: specs, entry-point registries, pluggy hook specs and the per-run manager."""
