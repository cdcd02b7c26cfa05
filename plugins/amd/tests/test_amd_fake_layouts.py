"""The fake libamd_smi is faithful to the installed ``amdsmi`` wrapper.

The wrapper reads the library's structs through ctypes declarations; if the fake laid a
field out anywhere else, every other test would pass against a library that does not exist.
So every struct size and field offset the fake writes is compared with the wrapper's own.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from amd_fakes import FakeGpu, build_library, implemented_symbols, wrapper_symbols

from xpushare.native import LibraryThread
from xpushare_amd import library


def _wrapper(lib: Path) -> object:
    with LibraryThread("amd-layout-test") as thread:
        native = thread.load([str(lib)], mode=library.DLOPEN_MODE)
        module = thread.call(library.import_amdsmi, native)
    return module.amdsmi_wrapper


def test_every_struct_the_fake_writes_matches_the_wrapper_field_by_field(tmp_path: Path) -> None:
    lib = build_library(tmp_path, [FakeGpu()])
    wrapper = _wrapper(lib)
    fake = ctypes.CDLL(str(lib))
    fake.fake_layout_type.restype = ctypes.c_char_p
    fake.fake_layout_field.restype = ctypes.c_char_p
    fake.fake_layout_value.restype = ctypes.c_size_t
    checked = 0
    for i in range(fake.fake_layout_count()):
        type_name = fake.fake_layout_type(i).decode()
        field = fake.fake_layout_field(i)
        cls = getattr(wrapper, type_name)
        expected = ctypes.sizeof(cls) if field is None else getattr(cls, field.decode()).offset
        assert fake.fake_layout_value(i) == expected, (type_name, field)
        checked += 1
    assert checked > 50


def test_the_fake_implements_real_wrapper_functions_and_stubs_the_rest(tmp_path: Path) -> None:
    symbols = set(wrapper_symbols())
    implemented = implemented_symbols()
    assert implemented <= symbols, implemented - symbols
    assert len(symbols) > 100
    lib = ctypes.CDLL(str(build_library(tmp_path, [FakeGpu()])))
    for symbol in symbols:
        assert hasattr(lib, symbol), symbol
