"""NodeContext: what node-side hooks get, and loading only on the vendor's thread."""

from __future__ import annotations

import ctypes

import pytest

from xpushare.native import LibraryNotFound, NativeLibrary, NodeContext, NotOnLibraryThread


@pytest.fixture
def ctx(thread):
    return NodeContext(vendor="acme", node_name="node-1", library=thread, config={"x": 1})


def startup(ctx: NodeContext) -> None:
    """A node-side hook as a vendor plugin writes it."""
    ctx.state["lib"] = ctx.load_library([ctx.config["library_path"]])


def detect(ctx: NodeContext) -> int:
    lib: NativeLibrary = ctx.state["lib"]
    return lib.function("fake_add", ctypes.c_int, [ctypes.c_int, ctypes.c_int])(40, 2)


def test_hooks_on_the_library_thread_load_and_keep_the_library(thread, fake_lib_path):
    ctx = NodeContext(
        vendor="acme",
        node_name="node-1",
        library=thread,
        config={"library_path": str(fake_lib_path)},
    )
    thread.call(startup, ctx)
    assert ctx.state["lib"].path == str(fake_lib_path)
    assert thread.call(detect, ctx) == 42


def test_load_library_off_the_library_thread_is_refused(ctx, fake_lib_path):
    with pytest.raises(NotOnLibraryThread) as info:
        ctx.load_library([fake_lib_path])
    assert info.value.vendor == "acme"
    assert info.value.thread_name == "MainThread"
    assert "'MainThread'" in str(info.value)
    assert "library thread" in str(info.value)


def test_load_library_reports_what_was_tried(thread, ctx, tmp_path):
    missing = tmp_path / "libmissing.so.1"
    with pytest.raises(LibraryNotFound) as info:
        thread.call(ctx.load_library, [missing])
    assert [a.path for a in info.value.attempts] == [str(missing)]


def test_config_and_state_default_to_fresh_dicts(thread):
    a = NodeContext(vendor="a", node_name="n", library=thread)
    b = NodeContext(vendor="b", node_name="n", library=thread)
    a.state["k"] = 1
    assert b.state == {}
    assert a.config == {}
    assert a.config is not b.config
