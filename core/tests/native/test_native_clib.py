"""xpushare.testing.clib: compiling fake vendor libraries for tests."""

from __future__ import annotations

import ctypes

import pytest

from xpushare.testing.clib import CompileError, LibraryVariants, compile_shared_library


def test_compiles_a_loadable_library_named_as_asked(tmp_path):
    path = compile_shared_library("int answer(void) { return 42; }\n", tmp_path, "libanswer.so.1")
    assert path == tmp_path / "libanswer.so.1"
    assert (tmp_path / "libanswer.so.1.c").read_text() == "int answer(void) { return 42; }\n"
    assert ctypes.CDLL(str(path)).answer() == 42
    assert sorted(p.name for p in tmp_path.iterdir()) == ["libanswer.so.1", "libanswer.so.1.c"]


def test_extra_arguments_reach_the_compiler(tmp_path):
    source = "int answer(void) { return ANSWER; }\n"
    path = compile_shared_library(source, tmp_path, "libdefined.so", extra_args=["-DANSWER=7"])
    assert ctypes.CDLL(str(path)).answer() == 7


def test_a_compile_failure_shows_the_compilers_message(tmp_path):
    with pytest.raises(CompileError) as info:
        compile_shared_library("int broken(void) { return undeclared; }\n", tmp_path, "libb.so")
    assert "libb.so.c" in str(info.value)
    assert "undeclared" in str(info.value)
    assert not (tmp_path / "libb.so").exists()


def test_a_missing_compiler_says_to_install_gcc(tmp_path):
    with pytest.raises(CompileError, match=r"not found on PATH.*Install gcc"):
        compile_shared_library("", tmp_path, "libx.so", compiler="xpushare-no-such-cc")


def test_name_must_be_a_file_name(tmp_path):
    with pytest.raises(ValueError, match="file name"):
        compile_shared_library("", tmp_path, "sub/libx.so")


def test_library_variants_compile_each_define_set_once(tmp_path):
    source = "#ifndef ANSWER\n#define ANSWER 42\n#endif\nint answer(void) { return ANSWER; }\n"
    variants = LibraryVariants(source, tmp_path, "libfake.so")
    full = variants.get()
    seven = variants.get("ANSWER=7")
    renamed = variants.get(name="libother.so")
    assert ctypes.CDLL(str(full)).answer() == 42
    assert ctypes.CDLL(str(seven)).answer() == 7
    assert renamed.name == "libother.so" and full.name == "libfake.so"
    # Each in a folder of its own, and asked again, the one already built.
    assert len({full.parent, seven.parent, renamed.parent}) == 3
    built_at = seven.stat().st_mtime_ns
    assert variants.get("ANSWER=7") == seven and seven.stat().st_mtime_ns == built_at
