"""Moore Threads GPUs: the official ``pymtml`` binding on the vendor thread, sGPU shares."""
