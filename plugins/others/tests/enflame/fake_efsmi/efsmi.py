"""A fake of Enflame's efsmi for the DRS commands Enflame's device plugin runs.

State (a JSON file named by FAKE_EFSMI_STATE): per GCU whether DRS is on and its instances,
the profiles (id -> [name, slices]) and slices per GCU (``gcu_profiles`` and
``gcu_capacity``, by GCU index, replace them for one GCU), the next instance id, and every
call made. ``listing`` (by GCU index) is printed as is by ``--list-profile``: a test's bad
output. FAKE_EFSMI_FAIL names a command (``create``, ``destroy``, ``list``, ``profiles``,
``on``, ``off``) that exits 1 instead. Output rows have the shape Enflame's device plugin
parses: ``-L`` ``| <gcu> <profile> <id> <uuid> |``; ``--list-profile`` (DRS on only, as
Enflame's plugin turns DRS on before listing) ``| <gcu> <profile> <id> <count> <memory>
<sips> |``, count the instances of the profile the GCU holds.
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


def profiles_of(state: dict, index: str) -> dict:
    return state.get("gcu_profiles", {}).get(index, state["profiles"])


def capacity_of(state: dict, index: str) -> int:
    return int(state.get("gcu_capacity", {}).get(index, state["capacity"]))


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
    if rest == ["--drs", "--list-profile"]:
        if fail == "profiles" or not gcu["drs"]:
            print(f"Error: DRS is not enabled on device {index}")
            return 1
        if index in state.get("listing", {}):
            sys.stdout.write(state["listing"][index])
            return 0
        print("+----------------------------------------------------------+")
        print("| Index  Profile   ID  Count  Memory  SIP                   |")
        print("+==========================================================+")
        capacity = capacity_of(state, index)
        for pid, (name, slices) in profiles_of(state, index).items():
            memory = name.split(".")[1].upper()
            print(f"| {index}  {name}  {pid}  {capacity // slices}  {memory}  {slices * 2} |")
        print("+----------------------------------------------------------+")
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
        offered = profiles_of(state, index)
        if rest[2] not in offered:
            print(f"Error: no DRS profile {rest[2]} on device {index}")
            return 1
        name, slices = offered[rest[2]]
        used = sum(i["slices"] for i in gcu["instances"])
        if used + slices > capacity_of(state, index):
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
