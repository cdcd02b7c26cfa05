"""Iluvatar CoreX GPUs: IXML (NVML's C API under Iluvatar's library), HAMi-core slices."""
