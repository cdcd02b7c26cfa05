"""The comparisons the webhook's isolation rules rest on, with the evasions people try."""

from __future__ import annotations

import pytest

from xpushare.scheduler.podguard import (
    capability_name,
    holds_device,
    normalize_path,
    prefix_reaches,
    relation,
)


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("/etc", "/etc"),
        ("/etc/", "/etc"),
        ("//etc", "/etc"),
        ("///etc//ld.so.preload/", "/etc/ld.so.preload"),
        ("/etc/./ld.so.preload", "/etc/ld.so.preload"),
        ("/etc/../etc", "/etc"),
        ("/usr/local/vgpu/..", "/usr/local"),
        ("/../../etc", "/etc"),
        ("etc", "/etc"),
        ("", "/"),
    ],
)
def test_paths_are_normalised_as_the_runtime_resolves_them(raw, normal):
    assert normalize_path(raw) == normal


@pytest.mark.parametrize(
    ("path", "guarded", "how"),
    [
        ("/etc/ld.so.preload", "/etc/ld.so.preload", "over"),
        ("/etc", "/etc/ld.so.preload", "above"),
        ("/", "/usr/local/vgpu", "above"),
        ("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu", "inside"),
        ("/etc/ld.so.preload.d", "/etc/ld.so.preload", None),
        ("/usr/local/vgpux", "/usr/local/vgpu", None),
        ("/etc/myapp", "/etc/ld.so.preload", None),
    ],
)
def test_relation_is_by_whole_path_components(path, guarded, how):
    assert relation(path, guarded) == how


@pytest.mark.parametrize(
    ("host_path", "held"),
    [
        ("/dev/nvidia0", True),
        ("/dev/nvidiactl", True),
        ("/dev/nvidia-caps/nvidia-cap2", True),
        ("/dev", True),
        ("/", True),
        ("/dev/shm", False),
        ("/dev/null", False),
        ("/devices", False),
        ("/var/run/nvidia", False),
    ],
)
def test_host_paths_that_hold_device_nodes(host_path, held):
    assert holds_device(host_path, "/dev/nvidia*") is held


def test_a_device_pattern_without_a_wildcard_is_a_path():
    assert holds_device("/dev", "/dev/kfd") and holds_device("/dev/kfd", "/dev/kfd")
    assert not holds_device("/dev/kfd2", "/dev/kfd")


@pytest.mark.parametrize(
    "raw", ["SYS_ADMIN", "sys_admin", "CAP_SYS_ADMIN", "cap_sys_admin", " Cap_Sys_Admin "]
)
def test_capability_names_are_read_as_the_runtime_reads_them(raw):
    assert capability_name(raw) == "SYS_ADMIN"


@pytest.mark.parametrize(
    ("prefix", "pattern", "reaches"),
    [
        ("CUDA_DISABLE_", "CUDA_DISABLE_CONTROL", True),
        ("CUDA_DISABLE_CONTROL", "CUDA_DISABLE_CONTROL", True),
        ("CUDA_DISABLE_CONTROLS", "CUDA_DISABLE_CONTROL", False),
        ("CUDA_DEVICE_", "CUDA_DEVICE_MEMORY_LIMIT*", True),
        ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT*", True),
        ("CUDA_DEVICE_MEMORY_LIMIT_0_", "CUDA_DEVICE_MEMORY_LIMIT*", True),
        ("CUDA_DEVICE_MEMORX", "CUDA_DEVICE_MEMORY_LIMIT*", False),
        ("APP_", "NVIDIA_VISIBLE_DEVICES", False),
        ("A?", "A?B", True),  # a glob inside a pattern: judged by its literal stem
    ],
)
def test_env_from_prefixes_reach_guarded_names(prefix, pattern, reaches):
    assert prefix_reaches(prefix, pattern) is reaches
