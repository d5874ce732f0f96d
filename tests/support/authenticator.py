"""A software WebAuthn authenticator (ES256, attestation "none") for tests of the pure code.

It does what a platform authenticator does, with real keys and signatures: it builds
authenticator data (relying party id hash, flags, counter, attested credential), the client
data JSON a browser would send, and signs `authenticatorData || sha256(clientDataJSON)`.
The browser tests use Chromium's virtual authenticator instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from workflow.messages import PasskeyAssertion
from workflow.passkeys import b64url

FLAG_UP, FLAG_UV, FLAG_AT = 0x01, 0x04, 0x40


@dataclass
class SoftAuthenticator:
    rp_id: str = "localhost"
    origin: str = "http://localhost:8080"
    counting: bool = True
    user_verified: bool = True
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    credential: bytes = field(default_factory=lambda: os.urandom(32))
    count: int = 0

    @property
    def credential_id(self) -> str:
        return b64url(self.credential)

    def cose_public_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps(
            {1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"),
             -3: numbers.y.to_bytes(32, "big")}
        )  # fmt: skip

    def _auth_data(self, *, attested: bool) -> bytes:
        flags = FLAG_UP | (FLAG_UV if self.user_verified else 0) | (FLAG_AT if attested else 0)
        if self.counting:
            self.count += 1
        data = hashlib.sha256(self.rp_id.encode()).digest() + bytes([flags])
        data += struct.pack(">I", self.count if self.counting else 0)
        if attested:
            data += bytes(16) + struct.pack(">H", len(self.credential)) + self.credential
            data += self.cose_public_key()
        return data

    def _client_data(self, kind: str, challenge: bytes, origin: str | None) -> bytes:
        return json.dumps(
            {"type": kind, "challenge": b64url(challenge), "origin": origin or self.origin,
             "crossOrigin": False}
        ).encode()  # fmt: skip

    def register(self, challenge: bytes) -> dict[str, Any]:
        """The JSON a browser sends after `navigator.credentials.create`."""
        auth_data = self._auth_data(attested=True)
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        return {
            "id": self.credential_id,
            "rawId": self.credential_id,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(self._client_data("webauthn.create", challenge, None)),
                "attestationObject": b64url(attestation),
            },
        }

    def sign(self, challenge: bytes, *, origin: str | None = None) -> PasskeyAssertion:
        """A signature over `challenge`, as `navigator.credentials.get` returns it."""
        auth_data = self._auth_data(attested=False)
        client_data = self._client_data("webauthn.get", challenge, origin)
        signature = self.key.sign(
            auth_data + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256())
        )
        return PasskeyAssertion(
            credential_id=self.credential_id,
            authenticator_data=b64url(auth_data),
            client_data_json=b64url(client_data),
            signature=b64url(signature),
        )

    def assertion_json(self, challenge: bytes) -> dict[str, Any]:
        a = self.sign(challenge)
        return {
            "id": a.credential_id,
            "rawId": a.credential_id,
            "type": "public-key",
            "response": {
                "authenticatorData": a.authenticator_data,
                "clientDataJSON": a.client_data_json,
                "signature": a.signature,
            },
        }
