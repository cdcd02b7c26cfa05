"""T-Head PPUs (Alibaba): HGML (NVML's C API under ``hgml`` names), HGGC quota slices."""
