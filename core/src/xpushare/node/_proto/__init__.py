"""Generated kubelet gRPC stubs (device plugin v1beta1, pod resources v1, DRA v1, plugin registration v1); see scripts/gen-proto. Not edited by hand."""
