"""Helpers for testing xpushare and vendor plugins without hardware.

Why a public package: vendor plugin authors test against the same fakes the core uses (fake
vendor libraries compiled from C, ...), so these helpers are part of the plugin API. Import
the modules you need, e.g. ``from xpushare.testing.clib import compile_shared_library``.
"""
