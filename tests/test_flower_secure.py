"""The secured federation's files and checks, without starting Flower (fedala_lab/flower/secure.py, local.py):
the certificates and SuperNode keys made offline (private keys 0600, the server's certificate signed by the CA for
127.0.0.1 and the given hosts, reused and never overwritten), a user's own files checked, and LocalFederation's
values refused before anything is made or started, a port in use named at once. The secured federation itself
(TLS, SuperNode authentication, ``flwr run`` over TLS): tests/test_flower_deploy.py."""

from __future__ import annotations

import ipaddress
import socket
import stat
import sys
from pathlib import Path

import pytest

from fedala_lab.errors import ConfigError, FedalaError
from fedala_lab.flower import secure
from fedala_lab.flower.local import LocalFederation
from fedala_lab.flower.secure import make_certificates, make_node_key

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_certificates_are_made_once_with_private_keys_readable_by_their_owner_only(tmp_path):
    files = make_certificates(tmp_path / "tls", ["lab-server.example", "10.1.2.3"], days=30)
    assert {p.name: mode(p) for p in (tmp_path / "tls").iterdir()} == {
        "ca.crt": 0o644, "server.pem": 0o644, "ca.key": 0o600, "server.key": 0o600}
    assert mode(tmp_path / "tls") == 0o700
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    cert.verify_directly_issued_by(ca)  # raises unless the CA signed it
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "lab-server.example"}
    assert set(san.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address("127.0.0.1"),
                                                            ipaddress.ip_address("10.1.2.3")}
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 30
    key = serialization.load_pem_private_key(files.key.read_bytes(), None)
    assert key.public_key() == cert.public_key()
    # again: the same files, untouched; a host they do not name is refused, not silently re-made
    before = {p: p.read_bytes() for p in (files.ca, files.cert, files.key)}
    assert make_certificates(tmp_path / "tls", ["10.1.2.3"]) == files
    assert {p: p.read_bytes() for p in before} == before
    with pytest.raises(FedalaError, match=r"server\.pem cannot serve this federation: it does not name other\.host"):
        make_certificates(tmp_path / "tls", ["other.host"])
    assert {p: p.read_bytes() for p in before} == before and not list((tmp_path / "tls").glob(".*tmp"))


def test_a_node_key_is_an_ec_key_pair_in_openssh_format_its_private_half_0600(tmp_path):
    pub = make_node_key(tmp_path / "keys" / "node0")
    private = tmp_path / "keys" / "node0"
    assert pub == tmp_path / "keys" / "node0.pub"
    assert (mode(private), mode(pub), mode(tmp_path / "keys")) == (0o600, 0o644, 0o700)
    key = serialization.load_ssh_private_key(private.read_bytes(), None)  # as flower-supernode reads it
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
    assert serialization.load_ssh_public_key(pub.read_bytes()) == key.public_key()  # as flwr supernode register
    # again: kept; a missing .pub is made from the private key
    text = private.read_bytes()
    pub.unlink()
    assert make_node_key(private) == pub and private.read_bytes() == text
    assert serialization.load_ssh_public_key(pub.read_bytes()) == key.public_key()


def test_a_private_key_others_can_read_is_refused(tmp_path):
    files = make_certificates(tmp_path / "tls")
    files.key.chmod(0o644)
    with pytest.raises(ConfigError, match=r"ssl_keyfile=.* a private key only its owner can read \(its mode is "
                                          r"644: chmod 600 .*server\.key\)"):
        secure.given_certificates(files.ca, files.cert, files.key)
    with pytest.raises(ConfigError, match=r"ssl_keyfile=.*a private key only its owner can read"):
        make_certificates(tmp_path / "tls")  # reused files are checked too
    make_node_key(tmp_path / "node")
    (tmp_path / "node").chmod(0o640)
    with pytest.raises(ConfigError, match=r"node_key=.*chmod 600"):
        make_node_key(tmp_path / "node")
    (tmp_path / "node").chmod(0o600)
    (tmp_path / "node").write_text("not a key")
    with pytest.raises(ConfigError, match=r"node_key=.*an EC private key in OpenSSH format"):
        make_node_key(tmp_path / "node")
    with pytest.raises(ConfigError, match=r"ssl_certfile='.*nothing\.pem' is not allowed: the path of an existing"):
        secure.given_certificates(files.ca, tmp_path / "nothing.pem", files.key)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"hosts": "server"}, r"hosts='server' is not allowed: a list of host names"),
    ({"hosts": ["a b"]}, r"hosts=\['a b'\] is not allowed"),
    ({"days": 0}, r"days=0 is not allowed: a whole number of days 1 … 3650"),
    ({"days": True}, r"days=True is not allowed"),
])
def test_bad_certificate_settings_are_refused_naming_them(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_certificates(tmp_path / "tls", **kwargs)
    assert not (tmp_path / "tls").exists()


def test_the_command_line_makes_the_files_and_refuses_in_one_line(tmp_path, capsys):
    assert secure.main(["certificates", str(tmp_path / "tls"), "--host", "10.0.0.5"]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'tls' / 'ca.crt'}\t(root certificate" in out and "server.key\t(its private key" in out
    assert secure.main(["node-key", str(tmp_path / "node3")]) == 0
    assert f"{tmp_path / 'node3.pub'}\t(public key: register it)" in capsys.readouterr().out
    assert secure.main(["certificates", str(tmp_path / "other"), "--days", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: days=0 is not allowed")


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"clients": 0}, "clients"), ({"clients": -2}, "clients"), ({"clients": True}, "clients"),
    ({"clients": 2.0}, "clients"), ({"clients": "2"}, "clients"),
    ({"heartbeat": 5}, "heartbeat"), ({"port": 0}, "port"), ({"port": 70000}, "port"),
    ({"start_timeout": 0}, "start_timeout"), ({"tls": "yes"}, "tls"),
    ({"authenticate": True}, "authenticate"), ({"certificates": ("a", "b", "c")}, "certificates"),
    ({"tls": True, "certificates": ("a", "b")}, "certificates"),
    ({"tls": True, "certificates": ("nothing.crt", "b", "c")}, "ssl_ca_certfile"),
])
def test_bad_federation_values_are_refused_before_anything_is_made(tmp_path, kwargs, field):
    kwargs = {"clients": 2, **kwargs}
    with pytest.raises(ConfigError) as err:
        LocalFederation(tmp_path / "fed", **kwargs)
    assert err.value.field == field and str(err.value).startswith(f"{field}=")
    assert not (tmp_path / "fed").exists()


def test_a_port_in_use_is_named_at_once_and_nothing_is_started(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        fed = LocalFederation(tmp_path / "fed", clients=2, port=port)
        with pytest.raises(FedalaError, match=rf"the SuperLink's port {port} on 127\.0\.0\.1 is in use"), fed:
            pass
    assert fed.procs == {} and fed.commands == []


_HOLDER = """
import sys, time
from fedala_lab.flower.local import LocalFederation
fed = LocalFederation(sys.argv[1], clients=1).__enter__()
print(" ".join(str(p.pid) for p in fed.procs.values()), flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_caller_leaves_no_flower_process_behind(tmp_path):
    """SIGKILL to the Python that opened a federation (no close, no finally) ends its SuperLink, SuperNode and
    what they started: before, they ran on for as long as nobody killed them by hand."""
    import signal
    import subprocess
    import time

    from fedala_lab.flower.local import alive, descendants

    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path / "fed")], stdout=subprocess.PIPE,
                              text=True)
    try:
        started = [int(p) for p in holder.stdout.readline().split()]
        assert len(started) == 2, started  # the SuperLink and one SuperNode
        tree = [q for p in started for q in (p, *descendants(p))]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.monotonic() + 60
    while [p for p in tree if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p for p in tree if alive(p)], "still running after their caller was killed"
