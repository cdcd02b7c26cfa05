"""MetaX GPUs: MXSML through ctypes, whole-GPU and shared sGPU modes, HAMi's sGPU QoS policy."""
