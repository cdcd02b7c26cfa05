"""Device memory of the GPU models named in the openb trace.

The trace gives models and milli-GPU shares only; the simulated devices still need a memory
size because a fractional task asks ``gpu_milli / 10`` percent of a device's memory and
compute (so the size never changes a decision, only what ``xpushare fit`` and the
assignments show). Sizes are those of the FGD simulator's ``MapGpuTypeMemoryMiB``
(hkust-adsl/kubernetes-scheduler-simulator, open-gpu-share/utils/const.go), in MiB. G1, G2
and G3 are Alibaba's undisclosed models: 32 GiB is an assumption, stated as such.
"""

from __future__ import annotations

GPU_MEMORY_MIB: dict[str, int] = {
    "P4": 7611,
    "2080": 11019,
    "1080": 11178,
    "M40": 11448,
    "T4": 15109,
    "V100M16": 16160,
    "P100": 16280,
    "A10": 22731,
    "3090": 24268,
    "V100M32": 32510,
    "A100": 81251,
    # Undisclosed in the trace; assumed.
    "G1": 32768,
    "G2": 32768,
    "G3": 32768,
}

#: Memory of a model the table does not know.
UNKNOWN_MODEL_MIB = 16384


def gpu_memory_mib(model: str) -> int:
    return GPU_MEMORY_MIB.get(model, UNKNOWN_MODEL_MIB)
