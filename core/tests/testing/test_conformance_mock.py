"""The vendor conformance suite, run against the built-in mock vendor from its entry point."""

from xpushare.testing.conformance import VendorConformance


class TestMockConformance(VendorConformance):
    vendor = "mock"

    def available(self, tmp_path, monkeypatch):
        monkeypatch.delenv("XPUSHARE_MOCK_DEVICES", raising=False)
        return {"devices": "2x A100-80GB"}

    def unavailable(self, tmp_path, monkeypatch):
        # The mock's "library" is its device spec: without one it must say so.
        monkeypatch.delenv("XPUSHARE_MOCK_DEVICES", raising=False)
        return {}
