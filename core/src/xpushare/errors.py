"""Exceptions that cross module boundaries, and what each tells its reader to do.

Every message names the vendor, the device and the pod involved where they are known, and
ends with what to do about it: these strings reach operators through events, logs and
``xpushare`` commands.
"""


class XpushareError(Exception):
    """Base of every error xpushare raises on purpose."""


class VendorUnavailable(XpushareError):
    """A vendor cannot work on this machine (library or hardware missing).

    Raised by a vendor's ``xpushare_startup`` or ``xpushare_detect``; the host records the
    vendor as *inactive* with this message, which is not an error: most nodes lack most
    vendors.
    """

    def __init__(self, vendor: str, reason: str) -> None:
        super().__init__(f"vendor {vendor!r} inactive: {reason}")
        self.vendor = vendor
        self.reason = reason


class AdmissionDenied(XpushareError):
    """A pod must not be admitted; the message is shown to the user who created it."""


class PluginError(XpushareError):
    """A plugin broke its contract: failed to load, raised, or returned invalid data."""

    def __init__(self, vendor: str, message: str) -> None:
        super().__init__(f"vendor plugin {vendor!r}: {message}")
        self.vendor = vendor


class CodecError(XpushareError):
    """An annotation could not be read; the message says which key and what is wrong."""
