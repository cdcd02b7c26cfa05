"""A real Kubernetes control plane on loopback, for tests: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler as processes.

Why: every protocol xpushare speaks (the extender's JSON, AdmissionReview over TLS, watches,
Leases, RBAC, claims) was tested only against doubles we wrote, which tell us what we assumed.
These are the real binaries of the release pinned in ``tools/kube`` (built by
``scripts/kube-binaries``), started the way a cluster runs them: TLS everywhere, client
certificates, service-account tokens signed by the API server, ``Node,RBAC`` authorization and
the admission plugins that call our webhook and evaluate our ValidatingAdmissionPolicy.

Without a kubelet a bound pod stays Pending on a Node object that :func:`ready_node` made, which
is all the scheduler, the webhook and the ledger look at::

    with ControlPlane(binaries, tmp_dir) as cluster:        # etcd, apiserver, controllers
        cluster.start_scheduler(config)                     # kube-scheduler, our extender in it
        core = cluster.core()                               # kubernetes.client.CoreV1Api
        core.create_node(ready_node("gpu-1", annotations, {"nvidia.com/gpu": "10"}))

Where a test needs kubelet itself (its device manager and DRA manager calling our node agent),
:class:`KubeletNode` runs a real one, registered as ``system:node:NAME``, in front of our fake
container runtime, and :class:`AgentThread` runs the node agent against it.

Every process is ended (terminate, then kill) when the block ends, whatever happened in it.
"""

from xpushare.testing.realcluster.agentthread import AgentThread, config_for
from xpushare.testing.realcluster.controlplane import (
    ADMISSION_PLUGINS,
    BINARIES,
    CONTROLLERS,
    ControlPlane,
    binaries_missing,
    start_xpushare_scheduler,
)
from xpushare.testing.realcluster.kubelet import (
    RUNTIME_BINARY,
    KubeletNode,
    config_env,
    kubelet_config,
)
from xpushare.testing.realcluster.objects import (
    create_ready_node,
    extender_config,
    ready_node,
    webhook_config,
)
from xpushare.testing.realcluster.pki import Pki
from xpushare.testing.realcluster.processes import (
    Component,
    binaries_folder,
    free_port,
    start_process,
    wait_url,
    write_kubeconfig,
)
from xpushare.testing.realcluster.standins import CutProxy, KubeletStandin, ReadyProxy

__all__ = [
    "ADMISSION_PLUGINS",
    "BINARIES",
    "CONTROLLERS",
    "RUNTIME_BINARY",
    "AgentThread",
    "Component",
    "ControlPlane",
    "CutProxy",
    "KubeletNode",
    "KubeletStandin",
    "Pki",
    "ReadyProxy",
    "binaries_folder",
    "binaries_missing",
    "config_env",
    "config_for",
    "create_ready_node",
    "extender_config",
    "free_port",
    "kubelet_config",
    "ready_node",
    "start_process",
    "start_xpushare_scheduler",
    "wait_url",
    "webhook_config",
    "write_kubeconfig",
]
