"""Self-signed certificates for the TLS tests, made with openssl."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed(where: Path, name: str, *extra: str) -> Path:
    """A self-signed certificate (`cert.pem`) and its key (`key.pem`) in `where`, by openssl."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", f"/CN={name}", *extra,
         "-keyout", str(where / "key.pem"), "-out", str(where / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    return where


def server_certificate(where: Path) -> Path:
    """A self-signed server certificate for 127.0.0.1."""
    return self_signed(where, "127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")


def mtls_config(server: Path, client: Path, *, handshake_first: bool = True) -> str:
    """nats-server's `tls` block: the server's certificate, clients' certificates verified
    against `client`'s (its own CA), TLS from the first byte when `handshake_first`."""
    return (
        "tls {\n"
        f'  cert_file: "{server / "cert.pem"}"\n'
        f'  key_file: "{server / "key.pem"}"\n'
        f'  ca_file: "{client / "cert.pem"}"\n'
        "  verify: true\n"
        f"  handshake_first: {'true' if handshake_first else 'false'}\n"
        "}\n"
    )
