"""Plugins that ship inside the core.

The core's own behaviour is itself a plugin (DESIGN.md §3): ``defaults`` holds the
``trylast`` implementations every vendor falls back to (request parsing, the GPU-like fit,
the built-in placement policies) and is registered in every host; ``mock`` is an ordinary
vendor plugin, found through its entry point like any third-party one.
"""

from xpushare.plugins.builtin import defaults

#: (name, plugin) pairs every host registers before loading entry points.
CORE_PLUGINS: tuple[tuple[str, object], ...] = (("xpushare-defaults", defaults),)

__all__ = ["CORE_PLUGINS"]
