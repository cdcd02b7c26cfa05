"""Fault soak of ``xpushare scheduler``: two replicas, the leader frozen or killed at random.

Clients bind pods through the leader while the leader is stopped (SIGSTOP, long enough to
lose its Lease) or killed (SIGKILL, a new replica process replaces it), watches are cut or
held back, relists answer late, the Lease is deleted and tenants edit pods' allocation
records (``xpushare.testing.soak`` lists the faults), and node agents allocate late or
never. At the end it checks what no fault may break: no device booked past
its capacity in the API server's annotations, the leader's ledger equal to a recount from
them, no reservation left (``xpushare.testing.soak``). Exit status 1 if any check failed.

    uv run python benchmarks/soak_scheduler.py                  # 10 minutes
    uv run python benchmarks/soak_scheduler.py --duration 30    # the short run
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from xpushare.testing.soak import SoakConfig, run_soak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of faults")
    parser.add_argument("--nodes", type=int, default=12, help="nodes of 2 mock GPUs each")
    parser.add_argument("--clients", type=int, default=4, help="concurrent pod streams")
    parser.add_argument("--fault-every", type=float, default=3.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-dir", type=Path, help="where the replicas' logs go")
    args = parser.parse_args()
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    config = SoakConfig(
        duration_s=args.duration,
        nodes=args.nodes,
        clients=args.clients,
        fault_every_s=args.fault_every,
        seed=args.seed,
        log_dir=args.log_dir,
        progress=lambda line: print(line, flush=True),
    )
    report = asyncio.run(run_soak(config))
    print("\n".join(report.lines()))
    print("PASS" if report.ok else "FAIL")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
