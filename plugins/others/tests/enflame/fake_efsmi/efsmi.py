"""A fake of Enflame's efsmi for the DRS commands Enflame's device plugin runs.

State (a JSON file named by FAKE_EFSMI_STATE): per GCU whether DRS is on and its instances,
the profiles (id -> [name, slices]) and slices per GCU, the next instance id, and every call
made. FAKE_EFSMI_FAIL names a command (``create``, ``destroy``, ``list``, ``on``, ``off``)
that exits 1 instead. Output rows have efsmi's shape: ``| <gcu> <profile> <id> <uuid> |``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    path = Path(os.environ["FAKE_EFSMI_STATE"])
    state = json.loads(path.read_text())
    state.setdefault("calls", []).append(argv)
    gcus = state.setdefault("gcus", {})
    code = run(argv, state, gcus)
    tmp = path.with_suffix(".tmp")  # atomic: a test may read the state while a call runs
    tmp.write_text(json.dumps(state))
    tmp.replace(path)
    return code


def run(argv: list[str], state: dict, gcus: dict) -> int:
    if len(argv) < 3 or argv[0] != "-i":
        print("usage: efsmi -i <index> ...", file=sys.stderr)
        return 2
    index, rest = argv[1], argv[2:]
    gcu = gcus.setdefault(index, {"drs": False, "instances": []})
    fail = os.environ.get("FAKE_EFSMI_FAIL", "")
    if rest == ["-L"]:
        if fail == "list":
            print("Error: cannot list instances")
            return 1
        print("+------------------------------------------------------+")
        print("| GCU  Profile   Instance  UUID                        |")
        for inst in gcu["instances"]:
            print(f"| {index}  {inst['profile']}  {inst['id']}  {inst['uuid']} |")
        print("+------------------------------------------------------+")
        return 0
    if rest in (["--drs", "on"], ["--drs", "off"]):
        if fail == rest[1]:
            print(f"Error: cannot turn DRS {rest[1]}")
            return 1
        if rest[1] == "off" and gcu["instances"]:
            print("Error: destroy the DRS instances first")
            return 1
        gcu["drs"] = rest[1] == "on"
        print(f"DRS {rest[1]} for device {index}")
        return 0
    if len(rest) == 3 and rest[:2] == ["--drs", "--create-instance"]:
        if fail == "create" or not gcu["drs"]:
            print("Error: create instance failed")
            return 1
        name, slices = state["profiles"][rest[2]]
        used = sum(i["slices"] for i in gcu["instances"])
        if used + slices > state["capacity"]:
            print("Error: not enough slices")
            return 1
        iid = state.get("next_id", 0)
        state["next_id"] = iid + 1
        uuid = f"7325501d-02bd-4da2-9289-{iid:012d}"
        gcu["instances"].append({"profile": name, "id": str(iid), "uuid": uuid, "slices": slices})
        print(f"Create DRS instance {name} success")
        return 0
    if len(rest) == 3 and rest[:2] == ["--drs", "--destroy-instance"]:
        if fail == "destroy":
            print("Error: destroy instance failed")
            return 1
        before = len(gcu["instances"])
        gcu["instances"] = [i for i in gcu["instances"] if i["id"] != rest[2]]
        if len(gcu["instances"]) == before:
            print("Error: no such instance")
            return 1
        print("Destroy DRS instance success")
        return 0
    print(f"unknown command {rest}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
