"""The core's own policies, by the names users select them with.

Registered through ``xpushare_register_policies`` by the core's default plugin, like any
third party's, so ``xpushare simulate --policy`` and the scheduler configuration see one
list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.scheduling.fragmentation import FragmentationPolicy
from xpushare.scheduling.hostaware import FgdCpuPolicy
from xpushare.scheduling.policies import BestFitPolicy, BinpackPolicy, SpreadPolicy

if TYPE_CHECKING:
    from xpushare.scheduling.policy import PolicyFactory

#: The policy used when the configuration names none.
DEFAULT_POLICY = "fgd-cpu"


def builtin_policies() -> list[tuple[str, PolicyFactory]]:
    return [
        ("binpack", BinpackPolicy),
        ("spread", SpreadPolicy),
        ("best-fit", BestFitPolicy),
        ("fgd", FragmentationPolicy),
        ("fgd-cpu", FgdCpuPolicy),
    ]
