"""Record files a vendor keeps on the node (native/records.py): bounded reads, atomic writes,
entries the vendor's check refuses dropped, never raised."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from xpushare.native.records import MAX_ENTRIES, MAX_FILE_BYTES, RecordFiles


def valid(entry: object) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("gpu"), str)


def records(tmp_path: Path) -> RecordFiles:
    return RecordFiles(tmp_path / "journal", valid=valid, what="vendor test: record")


def test_written_entries_read_back_and_an_empty_write_removes_the_file(tmp_path: Path) -> None:
    files = records(tmp_path)
    assert files.read("pod_c") == [] and files.names() == []
    files.write("pod_c", [{"gpu": "GPU-1", "start": 0}])
    assert files.read("pod_c") == [{"gpu": "GPU-1", "start": 0}]
    assert files.names() == ["pod_c"]
    assert not list(files.directory.glob(".*")), "no temporary file is left behind"
    files.write("pod_c", [])
    assert not files.path("pod_c").exists() and files.names() == []


def test_what_a_tenant_could_leave_there_is_bounded_and_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = records(tmp_path)
    files.directory.mkdir()
    caplog.set_level(logging.ERROR)
    files.path("huge").write_bytes(b" " * (MAX_FILE_BYTES + 1))
    assert files.read("huge") == []
    files.path("garbage").write_text("{not json")
    assert files.read("garbage") == []
    assert "over 65536 bytes" in caplog.text and "not JSON" in caplog.text
    files.path("shape").write_text(json.dumps({"instances": {"gpu": "x"}}))
    assert files.read("shape") == []
    many = [{"gpu": f"GPU-{i}"} for i in range(MAX_ENTRIES + 10)] + [{"gpu": 3}, "x"]
    files.path("many").write_text(json.dumps({"instances": [{"gpu": 1}, *many]}))
    read = files.read("many")
    assert len(read) == MAX_ENTRIES - 1 and all(valid(e) for e in read)
