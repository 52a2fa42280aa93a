"""The version of repro-check (one place, read by the package and by every trace header)."""

__version__ = "0.1.0"
