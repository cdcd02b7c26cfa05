"""xpushare-nvidia: the NVIDIA vendor plugin for xpushare."""
