"""Defaults shared by the command line and the configuration (kept import-light)."""

__all__ = ["DEFAULT_PORT"]

#: The /metrics port. Prometheus' exporter range 9100-9999 is fully allocated, so this sits
#: clear of it (to be registered on Prometheus' "default port allocations" wiki page).
DEFAULT_PORT = 19100
