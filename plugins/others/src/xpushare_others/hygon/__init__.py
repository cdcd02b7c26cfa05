"""Hygon DCU: the ROCm-derived management library of hy-smi, DCU memory and cores, vDCU slices."""
