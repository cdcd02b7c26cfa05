"""Generated kubelet device-plugin stubs (v1beta1); see scripts/gen-proto. Not edited by hand."""
