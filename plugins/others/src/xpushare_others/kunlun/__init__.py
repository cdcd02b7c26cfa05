"""Kunlunxin XPUs: XPUML through ctypes; whole XPUs (``kunlun``) or fixed-size vXPU slices
(``kunlun-vxpu``), placed by Kunlun's topology groups over 8-XPU boards."""
