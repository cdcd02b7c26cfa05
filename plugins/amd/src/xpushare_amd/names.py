"""The AMD vendor's names and defaults: resource names, configuration keys, units.

Kept in one place because users see them (pod specs, the vendor configuration, ``xpushare
plugins``) and several modules need them.
"""

from typing import Final

from xpushare.models import ResourceNames

VENDOR: Final = "amd"

#: HAMi's AMD resource names (research/hami-protocol.md §8.1), so a HAMi user's pod specs work
#: unchanged: ``amd.com/gpu`` devices, ``amd.com/gpumem`` MiB per device, ``amd.com/gpucores``
#: percent of each device's compute. ``amd.com/gpumem-percentage`` is ours, named like
#: NVIDIA's HAMi key; HAMi's AMD backend has no percent form.
DEFAULT_RESOURCES: Final = ResourceNames(
    count="amd.com/gpu",
    memory="amd.com/gpumem",
    memory_percent="amd.com/gpumem-percentage",
    compute="amd.com/gpucores",
)

#: HAMi's AMD backend takes a container that omits ``amd.com/gpucores`` as asking for 100 %
#: of each device's compute units (hami-protocol.md §8.2), unlike NVIDIA's 0.
DEFAULT_COMPUTE_PERCENT: Final = 100

#: Containers that may share one device; HAMi's ``deviceSplitCount`` default.
DEFAULT_SHARE_SLOTS: Final = 10

# Vendor configuration keys (``vendors: {amd: {...}}`` or the host's vendor_config).
CONFIG_LIBRARY_PATH: Final = "library_path"
"""A path to ``libamd_smi.so``, or a directory holding it; tried first."""
CONFIG_ROCM_ROOTS: Final = "rocm_roots"
"""ROCm install roots to search (``<root>/lib/libamd_smi.so``), e.g. a host mount."""
CONFIG_SHARE_SLOTS: Final = "share_slots"
CONFIG_DEV_ROOT: Final = "dev_root"
"""Where the host's ``/dev`` is seen by the node agent, to check device nodes exist."""

#: The library's file name, as ROCm installs it and as the ``amdsmi`` wrapper loads it.
LIBRARY_NAME: Final = "libamd_smi.so"

#: ROCm's default install root, and the environment variables that name another one (the
#: wrapper and GPUStack read the same, research/gpustack-devices.md §1.3, python-ecosystem.md
#: §3.2). ``AMD_SMI_LIB_PATH`` names the library's directory directly.
DEFAULT_ROCM_ROOT: Final = "/opt/rocm"
ROCM_ENV: Final = ("ROCM_HOME", "ROCM_PATH")
LIBRARY_DIR_ENV: Final = "AMD_SMI_LIB_PATH"

BYTES_PER_MIB: Final = 1024 * 1024
