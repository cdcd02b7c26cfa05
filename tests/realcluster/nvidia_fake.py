"""The NVIDIA plugin over its fake NVML, for the real kubelet's tests: the library compiled
once per session (the plugin's own test fake, plugins/nvidia/tests/fake_nvml), its device table
emptied for each module, and plugin hosts for the node agent that load it through the real
path (a driver root, dlopen on the vendor's library thread).

One library for the session, because pynvml binds one loaded library per process."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xpushare.plugins import HostSettings, PluginHost
from xpushare.plugins.builtin import CORE_PLUGINS
from xpushare.testing.clib import compile_shared_library

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "nvidia" / "tests"))

from fake_nvml import SONAME, SOURCE, FakeNvml
from nvidia_kit import base_config


@dataclass
class FakeNvidia:
    """The fake NVML's control, its driver root, and the node's HAMi-core folder."""

    fake: FakeNvml
    driver_root: Path
    hami_dir: Path

    @classmethod
    def build(cls, work: Path) -> FakeNvidia:
        driver_root = work / "driver-root"
        compile_shared_library(
            SOURCE.read_text(encoding="utf-8"),
            driver_root / "usr/lib64",
            SONAME,
            extra_args=["-lpthread"],
        )
        hami_dir = work / "vgpu"
        hami_dir.mkdir()
        # The node's copy of HAMi-core that Allocate mounts; its bytes are never loaded here.
        (hami_dir / "libvgpu.so").write_bytes(b"\x7fELF placeholder")
        return cls(FakeNvml(driver_root / "usr/lib64" / SONAME), driver_root, hami_dir)

    def host(self, node: str, **others: tuple[Any, dict[str, Any]]) -> PluginHost:
        """A strict plugin host for *node*'s agent with the NVIDIA plugin on this fake, and
        *others* (vendor name: (plugin module, config)) beside it."""
        from xpushare_nvidia import plugin

        vendors = {"nvidia": (plugin, base_config(self.driver_root, self.hami_dir)), **others}
        host = PluginHost(
            HostSettings(strict=True),
            core_plugins=CORE_PLUGINS,
            node_name=node,
            vendor_config={name: config for name, (_, config) in vendors.items()},
        )
        for name, (module, _) in vendors.items():
            record = host.register(name, module)
            if record.error is not None:
                host.close()
                raise AssertionError(f"vendor {name}: not registered: {record.error}")
        return host
