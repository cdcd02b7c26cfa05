"""Fixtures of the node agent's tests (the helpers themselves live in nodekit.py)."""

from nodekit import plugin_dir

__all__ = ["plugin_dir"]
