"""The version of capsnotes (read by ``pyproject.toml`` and recorded with every run)."""

__version__ = "0.2.0"
