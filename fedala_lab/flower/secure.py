"""The files a secured Flower federation needs, made offline: the TLS certificates the SuperLink serves (a
certificate authority of the federation's own, ``ca.crt``, and the SuperLink's certificate ``server.pem`` for its
host names and addresses, signed by it) and each SuperNode's authentication key (an EC P-384 key pair in
OpenSSH format, ``<name>`` and ``<name>.pub``, which ``flwr supernode register`` registers with the SuperLink).

Private keys (``ca.key``, ``server.key``, a SuperNode's ``<name>``) are written with mode 0600 under a temporary
name and renamed, so none is ever readable by others or half-written; certificates and public keys are 0644.
What exists is reused, never overwritten: run it again and it returns what is there (checked; only a set of
certificates a crash left incomplete is made anew). Made from the command line (docs/flower.md):

    python -m fedala_lab.flower.secure certificates DIR --host server.lab --host 10.0.0.5
    python -m fedala_lab.flower.secure node-key DIR/node0
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, FedalaError

LOCAL_HOSTS = ("127.0.0.1", "localhost")  # the SuperLink's own ServerApp processes reach it there
DAYS = 365
_PRIVATE, _PUBLIC = 0o600, 0o644


@dataclass(frozen=True)
class Certificates:
    """The SuperLink's TLS files: ``ca`` (the root certificate every SuperNode and ``flwr`` user verifies it
    with), ``cert`` (its certificate) and ``key`` (its private key: the SuperLink's machine only)."""

    ca: Path
    cert: Path
    key: Path

    def superlink_args(self) -> list[str]:
        """``flower-superlink``'s TLS flags for these files."""
        return ["--ssl-ca-certfile", str(self.ca), "--ssl-certfile", str(self.cert), "--ssl-keyfile", str(self.key)]


def write_file(path: Path, data: bytes, mode: int) -> None:
    """``data`` to ``path`` with ``mode`` from the start (a private key is never readable by others, not even for
    a moment), through a temporary name."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)  # what the umask took away from a certificate's 0644
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def check_private(path: Path, what: str) -> Path:
    """``path`` exists and only its owner may read it (as ssh insists for its keys); returned."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(what, str(path), "the path of an existing file")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ConfigError(what, str(path), "a private key only its owner can read",
                          f"its mode is {mode:o}: chmod 600 {path}")
    return path


def _hosts(hosts) -> list[str]:
    if not isinstance(hosts, list | tuple) or not all(isinstance(h, str) and h.strip() and " " not in h
                                                     for h in hosts):
        raise ConfigError("hosts", hosts, "a list of host names or IP addresses the SuperLink is reached at")
    return list(dict.fromkeys([*LOCAL_HOSTS, *(h.strip() for h in hosts)]))


def _names(hosts: list[str]):
    from cryptography import x509

    names = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return names


def make_certificates(folder: str | Path, hosts=(), *, days: int = DAYS) -> Certificates:
    """The SuperLink's certificates in ``folder`` (``ca.crt``, ``ca.key``, ``server.pem``, ``server.key``): made
    at first use — a new certificate authority and a certificate for ``hosts`` (and 127.0.0.1, localhost), valid
    ``days`` — and reused after, if they still name every host and are valid today (else a FedalaError says so).
    ``ca.key`` signs nothing but ``server.pem``: no process reads it; keep it off the other machines."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise ConfigError("days", days, "a whole number of days 1 … 3650 the certificates are valid")
    hosts = _hosts(hosts)
    folder = Path(folder).expanduser().resolve()
    files = Certificates(folder / "ca.crt", folder / "server.pem", folder / "server.key")
    if all(p.exists() for p in (files.ca, files.cert, files.key)):
        return _reuse(files, hosts)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)

    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=days)
    ca_key, key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"fedala_lab federation CA {folder.name}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA384()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[-1])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA384()))

    def private(k) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
    # the keys before the certificates: a folder with every certificate has its keys
    write_file(folder / "ca.key", private(ca_key), _PRIVATE)
    write_file(files.key, private(key), _PRIVATE)
    write_file(files.cert, cert.public_bytes(serialization.Encoding.PEM), _PUBLIC)
    write_file(files.ca, ca.public_bytes(serialization.Encoding.PEM), _PUBLIC)
    return files


def _reuse(files: Certificates, hosts: list[str]) -> Certificates:
    """Existing certificates, if they serve ``hosts`` today (the key private, the certificate signed by the CA)."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    check_private(files.key, "ssl_keyfile")
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
        cert.verify_directly_issued_by(ca)
        named = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound) as err:
        raise FedalaError(f"the certificates in {files.ca.parent} cannot be used ({err}): remove the folder to "
                          "make new ones, then copy the new ca.crt to every machine") from None
    missing = [n for n in _names(hosts) if n not in named]
    now = datetime.datetime.now(datetime.UTC)
    if missing or not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
        why = (f"it does not name {', '.join(str(n.value) for n in missing)}" if missing
               else f"it is valid {cert.not_valid_before_utc:%Y-%m-%d} … {cert.not_valid_after_utc:%Y-%m-%d}")
        raise FedalaError(f"{files.cert} cannot serve this federation: {why}. Remove {files.ca.parent} to make new "
                          "certificates (then copy the new ca.crt to every machine)")
    return files


def given_certificates(ca, cert, key) -> Certificates:
    """A user's own certificate files, checked: each exists, the private key is readable by its owner only."""
    paths = {}
    for field, p in (("ssl_ca_certfile", ca), ("ssl_certfile", cert)):
        if not isinstance(p, str | os.PathLike) or not Path(p).expanduser().is_file():
            raise ConfigError(field, p if not isinstance(p, os.PathLike) else str(p), "the path of an existing file")
        paths[field] = Path(p).expanduser().resolve()
    if not isinstance(key, str | os.PathLike):
        raise ConfigError("ssl_keyfile", key, "the path of an existing file")
    return Certificates(paths["ssl_ca_certfile"], paths["ssl_certfile"], check_private(key, "ssl_keyfile"))


def make_node_key(path: str | Path) -> Path:
    """A SuperNode's authentication key: ``path`` (the private key, OpenSSH format, mode 0600; only the SuperNode
    reads it) and ``path.pub`` (the public key the SuperLink's operator registers: ``flwr supernode register``),
    made unless ``path`` exists (then checked private, and ``.pub`` remade from it if missing). Returns the
    public key's path."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = Path(path).expanduser().resolve()
    pub = path.with_name(path.name + ".pub")
    if path.exists():
        check_private(path, "node_key")
        try:
            key = serialization.load_ssh_private_key(path.read_bytes(), None)
        except (ValueError, TypeError) as err:
            raise ConfigError("node_key", str(path), "an EC private key in OpenSSH format, not encrypted",
                              str(err)) from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ConfigError("node_key", str(path), "an EC (NIST curve) private key, as Flower requires")
    else:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = ec.generate_private_key(ec.SECP384R1())
        write_file(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()), _PRIVATE)
    if not pub.exists():
        write_file(pub, key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                  serialization.PublicFormat.OpenSSH) + b"\n", _PUBLIC)
    return pub


def main(argv: list[str] | None = None) -> int:
    """``python -m fedala_lab.flower.secure certificates DIR --host H … | node-key PATH``: the paths made (or
    found), one a line; a bad value: one line on stderr, exit code 2."""
    parser = argparse.ArgumentParser(prog="python -m fedala_lab.flower.secure",
                                     description="Make a secured Flower federation's files, offline.")
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("certificates", help="the SuperLink's TLS certificates (and its CA) in DIR")
    c.add_argument("folder", metavar="DIR")
    c.add_argument("--host", action="append", default=[],
                   help="a host name or IP address the SuperNodes and flwr reach the SuperLink at (repeat it)")
    c.add_argument("--days", type=int, default=DAYS, help=f"days the certificates are valid (default {DAYS})")
    k = sub.add_parser("node-key", help="a SuperNode's key pair: PATH (private) and PATH.pub (to register)")
    k.add_argument("path", metavar="PATH")
    args = parser.parse_args(argv)
    try:
        if args.what == "certificates":
            made = make_certificates(args.folder, args.host, days=args.days)
            print(f"{made.ca}\t(root certificate: every SuperNode and flwr user)\n"
                  f"{made.cert}\t(the SuperLink's certificate)\n{made.key}\t(its private key: the SuperLink only)")
        else:
            pub = make_node_key(args.path)
            print(f"{pub.with_suffix('')}\t(private key: this SuperNode only)\n{pub}\t(public key: register it)")
    except FedalaError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["LOCAL_HOSTS", "Certificates", "check_private", "given_certificates", "main", "make_certificates",
           "make_node_key", "write_file"]
