"""Enflame GCUs: EFML through ctypes; whole GCUs (``enflame``) or DRS partitions
(``enflame-drs``) cut by the profiles a node's GCUs offer."""
