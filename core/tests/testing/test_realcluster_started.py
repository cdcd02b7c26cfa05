"""The real-cluster harness's start/stop base: ``with`` starts, and stops however it ends."""

from __future__ import annotations

import pytest

from xpushare.testing.realcluster.agentthread import AgentThread
from xpushare.testing.realcluster.controlplane import ControlPlane
from xpushare.testing.realcluster.kubelet import KubeletNode
from xpushare.testing.realcluster.processes import Started


class Part(Started):
    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")
        if self.fail:
            raise TimeoutError("did not start")

    def stop(self) -> None:
        self.calls.append("stop")


class KeptPart(Part):
    stop_after_failed_start = False


def test_with_starts_returns_itself_and_stops_after_the_block_even_when_it_raises() -> None:
    with Part() as part:
        assert part.calls == ["start"]
    assert part.calls == ["start", "stop"]
    other = Part()
    with pytest.raises(ValueError), other:
        raise ValueError("the test failed")
    assert other.calls == ["start", "stop"]


def test_a_failed_start_is_stopped_unless_the_part_says_not_to() -> None:
    part, kept = Part(fail=True), KeptPart(fail=True)
    with pytest.raises(TimeoutError), part:
        pass
    with pytest.raises(TimeoutError), kept:
        pass
    assert part.calls == ["start", "stop"]
    assert kept.calls == ["start"]


def test_the_harness_parts_share_it_as_they_behaved_before() -> None:
    assert issubclass(ControlPlane, Started) and ControlPlane.stop_after_failed_start
    assert issubclass(KubeletNode, Started) and KubeletNode.stop_after_failed_start
    assert issubclass(AgentThread, Started) and not AgentThread.stop_after_failed_start
