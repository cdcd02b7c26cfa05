"""Helpers shared by more than one vendor of this distribution, and nothing vendor-specific.

Why: configuration files, library loading, sysfs lookups and Kubernetes quantities work the
same way for every vendor here; writing them once keeps the vendors' behaviour (and error
messages) identical where it should be.
"""
