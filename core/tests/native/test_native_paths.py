"""candidate_paths: where to look for a vendor library, best first."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpushare.native import STANDARD_LIBRARY_DIRS, candidate_paths


def test_without_roots_only_the_bare_sonames_are_tried():
    assert candidate_paths(["libnvidia-ml.so.1", "libnvidia-ml.so"]) == [
        "libnvidia-ml.so.1",
        "libnvidia-ml.so",
    ]


def test_each_root_then_each_directory_then_each_soname_then_bare_names():
    paths = candidate_paths(
        ["libfoo.so.1", "libfoo.so"], roots=["/host", Path("/run/driver")], extra_dirs=["opt/x"]
    )
    assert paths == [
        "/host/usr/lib64/libfoo.so.1",
        "/host/usr/lib64/libfoo.so",
        "/host/usr/lib/x86_64-linux-gnu/libfoo.so.1",
        "/host/usr/lib/x86_64-linux-gnu/libfoo.so",
        "/host/usr/lib/aarch64-linux-gnu/libfoo.so.1",
        "/host/usr/lib/aarch64-linux-gnu/libfoo.so",
        "/host/usr/lib/libfoo.so.1",
        "/host/usr/lib/libfoo.so",
        "/host/lib64/libfoo.so.1",
        "/host/lib64/libfoo.so",
        "/host/lib/libfoo.so.1",
        "/host/lib/libfoo.so",
        "/host/opt/x/libfoo.so.1",
        "/host/opt/x/libfoo.so",
        "/run/driver/usr/lib64/libfoo.so.1",
        "/run/driver/usr/lib64/libfoo.so",
        "/run/driver/usr/lib/x86_64-linux-gnu/libfoo.so.1",
        "/run/driver/usr/lib/x86_64-linux-gnu/libfoo.so",
        "/run/driver/usr/lib/aarch64-linux-gnu/libfoo.so.1",
        "/run/driver/usr/lib/aarch64-linux-gnu/libfoo.so",
        "/run/driver/usr/lib/libfoo.so.1",
        "/run/driver/usr/lib/libfoo.so",
        "/run/driver/lib64/libfoo.so.1",
        "/run/driver/lib64/libfoo.so",
        "/run/driver/lib/libfoo.so.1",
        "/run/driver/lib/libfoo.so",
        "/run/driver/opt/x/libfoo.so.1",
        "/run/driver/opt/x/libfoo.so",
        "libfoo.so.1",
        "libfoo.so",
    ]


def test_duplicates_are_dropped_keeping_the_first():
    paths = candidate_paths(
        ["libfoo.so", "libfoo.so"], roots=["/", "/host/", "/host"], extra_dirs=["/usr/lib", "lib"]
    )
    assert len(paths) == len(set(paths))
    assert paths[0] == "/usr/lib64/libfoo.so"
    assert paths[len(STANDARD_LIBRARY_DIRS)] == "/host/usr/lib64/libfoo.so"
    assert paths[-1] == "libfoo.so"
    assert len(paths) == 2 * len(STANDARD_LIBRARY_DIRS) + 1


def test_extra_dirs_without_roots_are_taken_from_the_filesystem_root():
    assert candidate_paths(["libfoo.so"], extra_dirs=["/usr/local/acme/lib", "opt/acme"]) == [
        "/usr/local/acme/lib/libfoo.so",
        "/opt/acme/libfoo.so",
        "libfoo.so",
    ]


def test_no_filesystem_is_consulted(tmp_path):
    # The root does not exist: the list is built from strings alone.
    root = tmp_path / "not-mounted"
    assert candidate_paths(["libfoo.so"], roots=[root])[0] == f"{root}/usr/lib64/libfoo.so"


@pytest.mark.parametrize("bad", ["/usr/lib/libfoo.so", "lib/libfoo.so", ""])
def test_sonames_must_be_file_names(bad):
    with pytest.raises(ValueError, match="file names"):
        candidate_paths([bad], roots=["/host"])
