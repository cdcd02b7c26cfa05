"""Biren GPUs (BR1xx): BRML, whole GPUs or SVI instances, shared by slot count."""
