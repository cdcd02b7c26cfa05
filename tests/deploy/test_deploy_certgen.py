"""The rotation job renews the webhook certificate under the chart's CA, through the real client.

It runs files/certgen.py (the script the CronJob mounts) against a local fake API server
(kmock) holding the Secret the chart renders, with the real ``openssl`` command.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import importlib.util
import shutil

import pytest
from chartkit import CHART, NAMESPACE, RELEASE, one, render
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kmock import resource

SECRETS = resource("", "v1", "secrets")
SECRET = f"{RELEASE}-xpushare-webhook-tls"
HOST = f"{RELEASE}-xpushare-scheduler.{NAMESPACE}.svc"

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def load_certgen():
    spec = importlib.util.spec_from_file_location("certgen", CHART / "files" / "certgen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered_secret() -> dict:
    secret = one(render(), "Secret", SECRET)
    return {k: v for k, v in secret.items() if k != "__template"}


def expiring_leaf(secret: dict, days_left: int) -> dict:
    """The chart's Secret with its serving certificate replaced by one that ends soon."""
    data = secret["data"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(data["ca.crt"]))
    ca_key = serialization.load_pem_private_key(base64.b64decode(data["ca.key"]), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=300))
        .not_valid_after(now + dt.timedelta(days=days_left))
        .sign(ca_key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    return {**secret, "data": {**data, "tls.crt": base64.b64encode(pem).decode()}}


def put(kmock, secret: dict) -> None:
    secret["metadata"]["resourceVersion"] = "7"
    kmock.objects[SECRETS, NAMESPACE, SECRET] = secret


def stored(kmock) -> dict:
    data = kmock.objects[SECRETS, NAMESPACE, SECRET]["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}


async def run(kmock, *extra: str) -> int:
    certgen = load_certgen()
    argv = [
        f"--namespace={NAMESPACE}",
        f"--secret={SECRET}",
        f"--dns={HOST}",
        f"--dns={RELEASE}-xpushare-scheduler",
        "--validity-days=365",
        "--renew-before-days=30",
        f"--server={kmock.url}",
        *extra,
    ]
    return await asyncio.to_thread(certgen.main, argv)


async def test_renews_a_certificate_that_expires_within_the_window(kmock):
    secret = expiring_leaf(rendered_secret(), days_left=10)
    put(kmock, secret)
    before = stored(kmock)
    assert await run(kmock) == 0
    after = stored(kmock)
    assert after["tls.crt"] != before["tls.crt"] and after["tls.key"] != before["tls.key"]
    assert after["ca.crt"] == before["ca.crt"] and after["ca.key"] == before["ca.key"]
    ca = x509.load_pem_x509_certificate(after["ca.crt"])
    leaf = x509.load_pem_x509_certificate(after["tls.crt"])
    leaf.verify_directly_issued_by(ca)  # the webhook's caBundle still trusts it
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [HOST, f"{RELEASE}-xpushare-scheduler"]
    left = leaf.not_valid_after_utc - dt.datetime.now(dt.UTC)
    assert dt.timedelta(days=363) < left < dt.timedelta(days=366)
    # The key matches the certificate.
    key = serialization.load_pem_private_key(after["tls.key"], None)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()
    # One compare-and-swap patch, carrying the version it read.
    (patch,) = kmock["patch"]
    assert patch.data["metadata"]["resourceVersion"] == "7"


async def test_leaves_a_fresh_certificate_alone(kmock):
    put(kmock, rendered_secret())
    before = stored(kmock)
    assert await run(kmock) == 0
    assert stored(kmock) == before
    assert list(kmock["patch"]) == []


async def test_a_secret_not_made_by_the_chart_is_an_error_naming_it(kmock, capsys):
    secret = expiring_leaf(rendered_secret(), days_left=1)
    del secret["data"]["ca.key"]
    put(kmock, secret)
    assert await run(kmock) == 1
    err = capsys.readouterr().err
    assert f"Secret {NAMESPACE}/{SECRET}" in err and "ca.key" in err
