"""ResourceClaims as kube-scheduler's DRA allocator leaves them, for DRA tests of any vendor.

Why here: a vendor's DRA test (the node agent's ResourceSlice, the fake DRA kubelet's
prepare) needs a claim allocated from the slice it published, with the consumed capacity a
share of a device takes, exactly as the API server holds it; writing it by hand in every
test is where a field gets misspelt.
"""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["allocated_claim"]


def allocated_claim(
    slice_obj: dict[str, Any],
    device: str,
    *,
    memory: str,
    cores: str,
    name: str = "train",
    namespace: str = "ml",
    pod: str = "trainer",
) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaim asking *memory* and *cores* of one device of
    *slice_obj*'s driver, allocated to *device* of its pool and reserved for a pod *pod*."""
    driver = slice_obj["spec"]["driver"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": driver,
                            "capacity": {"requests": {"memory": memory, "cores": cores}},
                        },
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": driver,
                            "pool": slice_obj["spec"]["pool"]["name"],
                            "device": device,
                            "shareID": str(uuid.uuid4()),
                            "consumedCapacity": {"memory": memory, "cores": cores},
                        }
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": str(uuid.uuid4())}],
        },
    }
