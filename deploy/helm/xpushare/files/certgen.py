"""Renew the webhook's serving certificate under the chart's own CA before it expires.

Why this exists: the chart generates a CA and a serving certificate at install (webhook.tls.mode
``self``). The API server (caBundle) and kube-scheduler (caFile) trust the CA, so re-issuing only
the serving certificate under the same CA changes nothing they hold; the scheduler re-reads its
certificate files every few seconds. A CronJob runs this script from the xpushare image, so a
cluster nobody upgrades for a year keeps a valid webhook. Signing uses the ``openssl`` command
(present in the image) and the API calls use the official client, so the script adds no
dependency. It reads and patches one Secret, by name; RBAC grants nothing else.

Exit status: 0 when the certificate is valid for longer than the renewal window or was renewed,
1 with a message naming the Secret when it cannot be read, checked or written.
"""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

#: Seconds in a day, for openssl's -checkend.
DAY_S = 86_400


def _openssl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
    )


def expires_within(cert_pem: str, seconds: int, work: Path) -> bool:
    """True when *cert_pem* expires in less than *seconds* (or cannot be read)."""
    (work / "current.crt").write_text(cert_pem)
    result = _openssl("x509", "-noout", "-checkend", str(seconds), "-in", "current.crt", cwd=work)
    return result.returncode != 0


def issue(ca_pem: str, ca_key_pem: str, dns: list[str], days: int, work: Path) -> tuple[str, str]:
    """A new key and a certificate for *dns*, signed by the CA; PEM texts."""
    (work / "ca.crt").write_text(ca_pem)
    (work / "ca.key").write_text(ca_key_pem)
    (work / "ext.cnf").write_text(
        "subjectAltName=" + ",".join(f"DNS:{name}" for name in dns) + "\n"
        "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    request = ["req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key"]
    sign = ["x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-sha256"]
    steps = [
        [*request, "-subj", f"/CN={dns[0]}", "-out", "tls.csr"],
        [*sign, "-CAcreateserial", "-days", str(days), "-extfile", "ext.cnf", "-out", "tls.crt"],
    ]
    for step in steps:
        result = _openssl(*step, cwd=work)
        if result.returncode != 0:
            raise RuntimeError(f"openssl {step[0]} failed: {result.stderr.strip()}")
    return (work / "tls.crt").read_text(), (work / "tls.key").read_text()


def _text(data: dict[str, str], key: str, where: str) -> str:
    if key not in data:
        raise RuntimeError(f"{where} has no {key}: it was not made by the chart's self mode")
    return base64.b64decode(data[key]).decode()


def renew(
    core: CoreV1Api, namespace: str, name: str, dns: list[str], days: int, before: int
) -> bool:
    """Renew the Secret's certificate if it expires within *before* days; True if renewed."""
    where = f"Secret {namespace}/{name}"
    secret = core.read_namespaced_secret(name, namespace)
    data = dict(secret.data or {})
    with tempfile.TemporaryDirectory(prefix="xpushare-certgen-") as tmp:
        work = Path(tmp)
        if not expires_within(_text(data, "tls.crt", where), before * DAY_S, work):
            return False
        ca, ca_key = _text(data, "ca.crt", where), _text(data, "ca.key", where)
        cert, key = issue(ca, ca_key, dns, days, work)
    patch = {
        # resourceVersion makes the write a compare-and-swap: two runs never interleave.
        "metadata": {"resourceVersion": secret.metadata.resource_version},
        "data": {
            "tls.crt": base64.b64encode(cert.encode()).decode(),
            "tls.key": base64.b64encode(key.encode()).decode(),
        },
    }
    core.patch_namespaced_secret(name, namespace, patch)
    return True


def _client(server: str | None) -> CoreV1Api:
    from kubernetes import client, config

    if server:
        return client.CoreV1Api(client.ApiClient(client.Configuration(host=server)))
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.CoreV1Api()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--dns", action="append", required=True, help="a DNS name (repeat)")
    parser.add_argument("--validity-days", type=int, default=365)
    parser.add_argument("--renew-before-days", type=int, default=30)
    parser.add_argument("--server", help="API server URL without credentials (tests)")
    args = parser.parse_args(argv)
    try:
        core = _client(args.server)
        renewed = renew(
            core,
            args.namespace,
            args.secret,
            args.dns,
            args.validity_days,
            args.renew_before_days,
        )
    except Exception as exc:
        print(
            f"certgen: cannot renew the webhook certificate in Secret "
            f"{args.namespace}/{args.secret}: {exc}",
            file=sys.stderr,
        )
        return 1
    state = "renewed" if renewed else f"valid for more than {args.renew_before_days} days"
    print(f"certgen: Secret {args.namespace}/{args.secret}: certificate {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
