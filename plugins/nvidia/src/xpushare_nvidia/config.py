"""The NVIDIA vendor's configuration: the ``nvidia`` section of the xpushare configuration.

Why a model of its own: the node agent hands each vendor its section as a plain mapping
(``ctx.config``); validating it once, with every option named and documented here, turns a
misspelled key or a wrong type into one clear error at startup instead of a default silently
used on a production node. README.md lists the same options for operators.

Over-commit of device memory is not here: the scheduler applies it from its own
configuration, so the inventory always states the physical memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from xpushare.models import ResourceNames

#: XIDs caused by applications, not by the GPU, that HAMi's device plugin ignores by default
#: (research/hami-protocol.md §6.5): 13 graphics engine exception, 31 MMU fault, 43 GPU
#: stopped processing, 45 preemptive cleanup, 68 video processor exception, 109 context
#: switch timeout. They are logged, never turned into "unhealthy".
DEFAULT_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})

#: HAMi's default number of containers that may share one GPU, ``deviceSplitCount``
#: (research/hami-protocol.md §9.2).
DEFAULT_SHARE_SLOTS = 10


#: How one GPU is shared (README.md, "Modes"): ``hami-core`` in-container limits,
#: ``mig`` MIG instances created for each container, ``exclusive`` whole GPUs.
GpuMode = Literal["hami-core", "mig", "exclusive"]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HamiCoreConfig(_Section):
    """Where HAMi-core (``libvgpu.so``) lives and how containers get it.

    The defaults are HAMi's chart layout (research/hami-protocol.md §6.4): the library and
    the per-container cache directories under ``/usr/local/vgpu`` on the node, mounted at the
    same path in containers.
    """

    #: The directory on the node that holds ``libvgpu.so``, ``ld.so.preload`` and
    #: ``containers/<pod uid>_<container>/`` (HAMi's ``<HOOK_PATH>/vgpu``).
    host_dir: str = "/usr/local/vgpu"
    #: Where that directory appears inside workload containers.
    container_dir: str = "/usr/local/vgpu"
    #: Where the node agent itself sees ``host_dir`` (its own hostPath mount); default:
    #: the same path.
    agent_dir: str | None = None
    #: The file name of HAMi-core's library in ``host_dir``.
    library: str = "libvgpu.so"
    #: Mount ``<host_dir>/ld.so.preload`` at ``/etc/ld.so.preload`` so every process of the
    #: container loads HAMi-core. Without it the limits are not enforced.
    preload: bool = True
    #: Host directory HAMi-core keeps its lock files in, mounted at the same path.
    lock_dir: str = "/tmp/vgpulock"
    #: Refuse Allocate for shared GPUs when ``libvgpu.so`` is missing on the node (a
    #: container would otherwise run without any limit, silently).
    require_library: bool = True
    #: ``LIBCUDA_LOG_LEVEL`` for HAMi-core (0 errors ... 4 debug); ``None``: not set.
    log_level: int | None = Field(default=None, ge=0, le=4)
    #: ``GPU_CORE_UTILIZATION_POLICY``: ``default`` (not set: limit compute under contention
    #: only), ``force`` (always), ``disable`` (never).
    core_policy: Literal["default", "force", "disable"] = "default"

    @property
    def agent_path(self) -> str:
        return self.agent_dir or self.host_dir


class NvidiaConfig(_Section):
    """Every option of the ``nvidia`` vendor section, with its default."""

    # -- loading NVML ---------------------------------------------------------------------
    #: An explicit path of ``libnvidia-ml.so.1``, tried before anything else.
    library_path: str | None = None
    #: Directories where the host's (or the driver container's) root filesystem is mounted,
    #: e.g. ``/run/nvidia/driver`` or ``/host``: NVML is searched in their library
    #: directories (``usr/lib64``, ``usr/lib/x86_64-linux-gnu``, ...).
    driver_roots: tuple[str, ...] = ()
    #: Also try the bare soname through the dynamic loader's own search (``LD_LIBRARY_PATH``,
    #: ``ld.so.cache``): what works when the NVIDIA container runtime injected the library.
    search_loader_path: bool = True

    # -- inventory ------------------------------------------------------------------------
    #: How many containers may share one (non-MIG) GPU.
    share_slots: int = Field(default=DEFAULT_SHARE_SLOTS, ge=1)
    #: MiB to report for GPUs whose NVML memory query is not supported (unified-memory
    #: parts); 0 leaves such GPUs out of the inventory, as HAMi does.
    preconfigured_memory_mib: int = Field(default=0, ge=0)
    #: Where sysfs is mounted, for the NUMA node of GPUs NVML cannot place.
    sysfs_root: str = "/sys"

    # -- modes ----------------------------------------------------------------------------
    #: How the node's GPUs are shared; ``None``: as each GPU is found (a GPU already in MIG
    #: mode serves the instances that exist on it, the others ``hami-core``). A GPU whose
    #: mode differs is switched when nothing runs on it, never while a pod uses it.
    mode: GpuMode | None = None
    #: Modes of single GPUs, by UUID or NVML index ("0"), over ``mode``.
    gpu_modes: dict[str, GpuMode] = Field(default_factory=dict)
    #: MIG profiles offered on GPUs in ``mig`` mode (``1g.10gb``, ...); empty: all NVML has.
    mig_profiles: tuple[str, ...] = ()
    #: Directory of the record of MIG instances the agent created, kept across restarts;
    #: default: ``<hami_core agent dir>/xpushare-meta/mig``.
    mig_journal_dir: str | None = None

    # -- allocation -----------------------------------------------------------------------
    #: ``envvar``: visible devices through ``NVIDIA_VISIBLE_DEVICES`` (the NVIDIA container
    #: runtime); ``cdi``: fully qualified CDI device names instead.
    device_list_strategy: Literal["envvar", "cdi"] = "envvar"
    #: The CDI kind of NVIDIA's generated specs (``nvidia-ctk cdi generate``).
    cdi_kind: str = Field(default="nvidia.com/gpu", pattern=r"^[a-z0-9.-]+/[a-z0-9._-]+$")
    hami_core: HamiCoreConfig = HamiCoreConfig()

    # -- health ---------------------------------------------------------------------------
    #: Watch NVML events (XIDs, double-bit ECC) and probe devices for loss.
    health_checks: bool = True
    #: XIDs that are only logged. Replaces the default set when given.
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    #: Seconds without a new critical event, with the device answering NVML again, before
    #: an unhealthy device is reported healthy again.
    recovery_quiet_s: float = Field(default=60.0, ge=0)
    #: Longest time one health check blocks in NVML's event wait. The wait holds the
    #: vendor's library thread, so Allocate queues behind it: keep it short.
    event_wait_max_s: float = Field(default=0.1, ge=0, le=5)

    # -- monitoring -----------------------------------------------------------------------
    #: Read HAMi-core's per-container accounting files for per-container usage.
    container_usage: bool = True

    def mode_of(self, uuid: str, index: int) -> GpuMode | None:
        """The mode GPU *uuid* (NVML index *index*) is configured to serve in."""
        return self.gpu_modes.get(uuid) or self.gpu_modes.get(str(index)) or self.mode

    @property
    def journal_dir(self) -> str:
        return self.mig_journal_dir or f"{self.hami_core.agent_path}/xpushare-meta/mig"

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> NvidiaConfig:
        """Validate the vendor section; ``ValueError`` names each wrong key and what to do."""
        try:
            return cls.model_validate(dict(raw))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(section)'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ValueError(
                f"invalid configuration of vendor 'nvidia': {problems}. Fix the 'nvidia' "
                "section of the xpushare configuration (options: plugins/nvidia/README.md)."
            ) from None


#: HAMi's resource names (research/hami-protocol.md §2.9), so a HAMi user's pod specs work
#: unchanged; each can be renamed with the environment variable next to it, read once when
#: the plugin is loaded (the scheduler and the node agent must agree, so set it in both).
RESOURCE_DEFAULTS: Final[Mapping[str, tuple[str, str]]] = {
    "count": ("XPUSHARE_NVIDIA_RESOURCE_COUNT", "nvidia.com/gpu"),
    "memory": ("XPUSHARE_NVIDIA_RESOURCE_MEMORY", "nvidia.com/gpumem"),
    "memory_percent": ("XPUSHARE_NVIDIA_RESOURCE_MEMORY_PERCENT", "nvidia.com/gpumem-percentage"),
    "compute": ("XPUSHARE_NVIDIA_RESOURCE_COMPUTE", "nvidia.com/gpucores"),
}


def resource_names(environ: Mapping[str, str]) -> ResourceNames:
    """The vendor's resource names: HAMi's, or the ones the environment renames them to."""
    return ResourceNames(
        **{
            field_name: environ.get(variable, "").strip() or default
            for field_name, (variable, default) in RESOURCE_DEFAULTS.items()
        }
    )
