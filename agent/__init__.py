"""commpulse: per-host telemetry of collective-communication traffic (T, B, D)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("commpulse")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
