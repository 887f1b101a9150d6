"""``cdml-edge doctor`` on a good and on a broken setup.

Real ONNX files run by onnxruntime, a real Mosquitto (plain on 127.0.0.1:1883, and a TLS
listener started here), real folders.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.models import image_classifier, series_anomaly
from typer.testing import CliRunner

from cdml_edge.cli import app
from cdml_edge.config import load_config
from cdml_edge.doctor import Check, run_checks

PLAIN_BROKER = ("127.0.0.1", 1883)


# -- a TLS broker ----------------------------------------------------------------------------


def _cert_pair(tmp: Path, stem: str) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca.pem, cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{stem} test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem, cert_pem, key_pem = tmp / f"{stem}-ca.pem", tmp / f"{stem}.pem", tmp / f"{stem}.key"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_pem, cert_pem, key_pem


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, Path]]:
    """Mosquitto with a TLS listener: (port, the CA that signed it, an unrelated CA)."""
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not Path(exe).exists():
        pytest.fail("mosquitto is not installed (apt-get install mosquitto)")
    tmp = tmp_path_factory.mktemp("tls-broker")
    tmp.chmod(0o755)
    ca, cert, key = _cert_pair(tmp, "broker")
    other_ca, _, _ = _cert_pair(tmp, "other")
    for p in (ca, cert, key):
        p.chmod(0o644)
    port = _free_port()
    conf = tmp / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\n"
        f"cafile {ca}\ncertfile {cert}\nkeyfile {key}\n"
        "persistence false\nlog_dest stderr\nuser root\n"
    )
    proc = subprocess.Popen(
        [exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        for _ in range(100):
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"mosquitto exited: {err}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("the TLS broker did not start listening")
        yield port, ca, other_ca
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- setups ----------------------------------------------------------------------------------


def good_config(tmp: Path, mqtt: dict[str, object]) -> Path:
    models = tmp / "models"
    models.mkdir()
    image_classifier(models / "digits.onnx")
    series_anomaly(models / "vib.onnx")
    for d in ("in/cam", "in/vib", "in/vib-done"):
        (tmp / d).mkdir(parents=True)
    (tmp / "in/cam/0001.jpg").write_bytes(b"\xff\xd8\xff")
    cfg = {
        "device": {"id": "doctor-test"},
        "sources": [
            {"name": "cam", "path": "in/cam", "modality": "image", "on_done": "delete"},
            {
                "name": "vib",
                "path": "in/vib",
                "modality": "timeseries",
                "on_done": "move",
                "move_to": "in/vib-done",
            },
        ],
        "models": {
            "image": {"path": "models/digits.onnx"},
            "timeseries": {"path": "models/vib.onnx", "providers": ["CPUExecutionProvider"]},
        },
        "mqtt": mqtt,
        "spool": {"dir": "state/spool", "max_bytes": "16MiB"},
        "retention": {"dir": "state/retention", "max_bytes": "32MiB"},
        "quarantine": {"dir": "state/quarantine", "max_bytes": "1MiB"},
    }
    path = tmp / "factory.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def failures(checks: list[Check]) -> list[str]:
    return [c.line(ascii_only=True) for c in checks if not c.ok]


# -- tests -----------------------------------------------------------------------------------


def test_good_setup_plain_broker(tmp_path: Path) -> None:
    host, port = PLAIN_BROKER
    cfg = load_config(good_config(tmp_path, {"url": f"mqtt://{host}:{port}"}))
    checks = by_name(run_checks(cfg))
    assert not failures(list(checks.values())), failures(list(checks.values()))
    checks.pop("privileges", None)  # the root caveat, when the tests run as root
    assert set(checks) == {
        "native reader",
        "release",
        "model image",
        "model timeseries",
        "source cam",
        "source vib",
        "state folder",
        "spool folder",
        "retention folder",
        "quarantine folder",
        "broker",
    }
    # a development venv: no release of install.sh, no lock beside it
    assert checks["release"].detail.endswith("not an installed release, no lock")
    assert "1x1x8x8 zero input on CPUExecutionProvider" in checks["model image"].detail
    assert "1x2x16 zero input" in checks["model timeseries"].detail
    assert "1 entries" in checks["source cam"].detail
    assert "MQTT 5 CONNACK" in checks["broker"].detail
    # The doctor leaves nothing behind in the folders it probed.
    assert not (tmp_path / "state").exists()


def test_foreign_entries_in_the_retention_folder_are_a_warning(tmp_path: Path) -> None:
    host, port = PLAIN_BROKER
    cfg = load_config(good_config(tmp_path, {"url": f"mqtt://{host}:{port}"}))
    assert cfg.retention is not None
    cfg.retention.dir.mkdir(parents=True)
    (cfg.retention.dir / "train.zip").write_bytes(b"an export")
    (cfg.retention.dir / "bad\x1bname.zip").write_bytes(b"x")
    checks = by_name(run_checks(cfg))
    warn = checks["retention foreign"]
    assert warn.warn and warn.ok  # reported, not a failure
    assert "2 entries" in warn.detail and "'train.zip'" in warn.detail
    assert "\\x1b" in warn.detail and "\x1b" not in warn.detail  # escaped for the terminal
    assert (cfg.retention.dir / "train.zip").read_bytes() == b"an export"


def test_good_setup_tls_broker(tmp_path: Path, tls_broker: tuple[int, Path, Path]) -> None:
    port, ca, _ = tls_broker
    path = good_config(tmp_path, {"url": f"mqtts://127.0.0.1:{port}", "tls": {"ca": str(ca)}})
    runner = CliRunner()
    res = runner.invoke(app, ["doctor", "--config", str(path), "--ascii"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any(
        ln.startswith("OK   broker tls: 127.0.0.1") and "broker.test" in ln for ln in lines
    ), res.output
    assert any(ln.startswith("OK   broker: ") and "CONNACK" in ln for ln in lines), res.output
    # Run as root, the caveat about folder checks is a warning, not a check.
    assert lines[-1] in ("13/13 checks passed", "13/13 checks passed, 1 warning"), res.output


def test_broken_setup(tmp_path: Path, tls_broker: tuple[int, Path, Path]) -> None:
    port, _, other_ca = tls_broker
    path = good_config(tmp_path, {"url": f"mqtts://127.0.0.1:{port}", "tls": {"ca": str(other_ca)}})
    data = yaml.safe_load(path.read_text())
    # A model file that is not ONNX, a provider this build lacks, a missing source folder,
    # a spool below a regular file, a retention bound no disk here can hold.
    (tmp_path / "models/digits.onnx").write_bytes(b"not an onnx file")
    data["models"]["timeseries"]["providers"] = ["NoSuchExecutionProvider"]
    data["sources"][1]["path"] = "in/missing"
    (tmp_path / "blocker").write_text("x")
    data["spool"]["dir"] = "blocker/spool"
    data["retention"]["max_bytes"] = "1000000000GiB"
    path.write_text(yaml.safe_dump(data))

    checks = by_name(run_checks(load_config(path), timeout_s=3))
    # (the native reader is covered by its own test)
    bad = {name for name, c in checks.items() if not c.ok} - {"native reader"}
    assert bad == {
        "model image",
        "model timeseries",
        "source vib",
        "spool folder",
        "retention folder",
        "quarantine folder",
        "broker tls",
    }, failures(list(checks.values()))
    assert "cannot load" in checks["model image"].detail
    assert "NoSuchExecutionProvider not available" in checks["model timeseries"].detail
    assert "in/missing does not exist" in checks["source vib"].detail
    assert "blocker is not a folder" in checks["spool folder"].detail
    # Bounds are summed per filesystem: quarantine shares the disk the retention bound overfills.
    assert "free, retention + quarantine may still grow" in checks["retention folder"].detail
    assert "retention + quarantine" in checks["quarantine folder"].detail
    assert "TLS handshake failed" in checks["broker tls"].detail
    assert "CERTIFICATE_VERIFY_FAILED" in checks["broker tls"].detail
    assert checks["source cam"].ok

    res = CliRunner().invoke(app, ["doctor", "--config", str(path), "--ascii", "--timeout", "3"])
    assert res.exit_code == 1
    n_fail = sum(ln.startswith("FAIL") for ln in res.output.splitlines())
    assert n_fail == sum(not c.ok for c in checks.values())


def test_native_reader_missing_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdml_edge.doctor.system import check_native_reader

    monkeypatch.setenv("CDML_EDGE_NATIVE", "0")  # what a wheel without the C build looks like
    check = check_native_reader()
    assert not check.ok and "not built" in check.detail


def test_native_reader_names_its_backends() -> None:
    from cdml_edge.archive.native import backends
    from cdml_edge.doctor.system import check_native_reader

    check = check_native_reader()
    assert check.ok and "zstd: libzstd 1.5.6 (bundled)" in check.detail
    assert f"inflate: {backends()['inflate']}" in check.detail


def test_native_reader_warns_of_a_slower_inflate() -> None:
    code = (
        "from cdml_edge.doctor.system import check_native_reader; "
        "print(check_native_reader().line(ascii_only=True))"
    )
    env = dict(os.environ, CDML_EDGE_NO_LIBDEFLATE="1")
    env.pop("CDML_EDGE_NATIVE", None)
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("WARN native reader:")
    assert "inflate: zlib" in res.stdout and "through zlib" in res.stdout


def test_unreachable_broker(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens there
    cfg = load_config(good_config(tmp_path, {"url": f"mqtt://127.0.0.1:{port}"}))
    checks = by_name(run_checks(cfg, timeout_s=2))
    assert not checks["broker"].ok
    assert "unreachable" in checks["broker"].detail


def test_invalid_config_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "factory.yaml"
    path.write_text("sources:\n  - name: a\n    modality: image\n    pathh: x\n")
    res = subprocess.run(
        [sys.executable, "-m", "cdml_edge.cli", "doctor", "--config", str(path), "--ascii"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout.startswith("FAIL config:")
    assert "pathh" in res.stdout


def test_broker_settings_resolved_like_the_agent(tmp_path: Path) -> None:
    """The doctor reports the agent's own setup errors (mqtt_tls), naming the field."""
    host, port = PLAIN_BROKER
    url = f"mqtt://{host}:{port}"
    cases = {
        "missing-ca": ({"url": url, "tls": {"ca": str(tmp_path / "no-ca.pem")}}, "mqtt.tls.ca:"),
        "no-password-file": (
            {"url": url, "username": "u", "password_file": str(tmp_path / "no-password")},
            "mqtt.password_file: cannot read",
        ),
        "unset-env": (
            {"url": url, "username": "u", "password_env": "CDML_DOCTOR_TEST_UNSET"},
            "CDML_DOCTOR_TEST_UNSET is not set",
        ),
    }
    for name, (mqtt, expected) in cases.items():
        (tmp_path / name).mkdir()
        cfg = load_config(good_config(tmp_path / name, mqtt))
        checks = by_name(run_checks(cfg, timeout_s=3))
        assert not checks["broker"].ok, (name, checks["broker"])
        assert expected in checks["broker"].detail, (name, checks["broker"].detail)
        assert "broker tls" not in checks


def test_password_file_is_read_the_agent_way(tmp_path: Path) -> None:
    from cdml_edge.doctor.broker import check_broker
    from cdml_edge.outputs.mqtt.tls import resolve_password

    secret = tmp_path / "mqtt-password"
    secret.write_text("s3cret\n")
    host, port = PLAIN_BROKER
    cfg = load_config(
        good_config(
            tmp_path,
            {
                "url": f"mqtt://{host}:{port}",
                "username": "u",
                "password_file": str(secret),
            },
        )
    )
    assert cfg.mqtt is not None
    assert resolve_password(cfg.mqtt) == "s3cret"
    (broker,) = check_broker(cfg.mqtt, timeout_s=3)
    assert broker.ok, broker  # the local Mosquitto allows anonymous and any password


def test_root_is_warned_that_folder_checks_prove_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = PLAIN_BROKER
    path = good_config(tmp_path, {"url": f"mqtt://{host}:{port}"})
    cfg = load_config(path)
    root = by_name(run_checks(cfg, euid=0))
    assert root["privileges"].warn and root["privileges"].ok
    assert "--user cdml-edge" in root["privileges"].detail
    assert "privileges" not in by_name(run_checks(cfg, euid=1000))

    monkeypatch.setattr("cdml_edge.doctor.system.os.geteuid", lambda: 0)
    res = CliRunner().invoke(app, ["doctor", "--config", str(path), "--ascii"])
    assert res.exit_code == 0, res.output  # a warning does not fail the doctor
    lines = res.output.splitlines()
    assert lines[1].startswith("WARN privileges: running as root"), res.output
    assert lines[-1] == "12/12 checks passed, 1 warning"


def test_user_option_judges_folders_for_the_service_account() -> None:
    """As root every probe passes; ``--user`` applies the permission bits of that account."""
    nobody = pwd.getpwnam("nobody")
    assert nobody.pw_uid != os.geteuid()
    base = Path(tempfile.mkdtemp(prefix="cdml-doctor-"))
    try:
        base.chmod(0o755)  # folders owned by the test's user, readable by all, writable by it
        host, port = PLAIN_BROKER
        path = good_config(base, {"url": f"mqtt://{host}:{port}"})
        for p in [base, *base.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        cfg = load_config(path)
        as_me = by_name(run_checks(cfg))
        folders = [
            "source cam",
            "source vib",
            "spool folder",
            "retention folder",
            "quarantine folder",
        ]
        assert all(as_me[f].ok for f in folders), failures(list(as_me.values()))

        as_nobody = by_name(run_checks(cfg, user="nobody"))
        assert as_nobody["user"].ok and "privileges" not in as_nobody
        for f in folders:
            assert not as_nobody[f].ok, as_nobody[f]
            assert "by nobody" in as_nobody[f].detail, as_nobody[f]
        assert "on_done: delete" in as_nobody["source cam"].detail
        assert "cannot be created" in as_nobody["spool folder"].detail

        res = CliRunner().invoke(
            app, ["doctor", "--config", str(path), "--ascii", "--user", "nobody"]
        )
        assert res.exit_code == 1
        assert "FAIL spool folder:" in res.output and "WARN" not in res.output

        # Group-writable folders of a group nobody is not in do not help; world-writable do.
        for p in [base, *base.rglob("*")]:
            if p.is_dir():
                p.chmod(0o775)
        assert not by_name(run_checks(cfg, user="nobody"))["spool folder"].ok
        for p in [base, *base.rglob("*")]:
            if p.is_dir():
                p.chmod(0o777)
        fixed = by_name(run_checks(cfg, user="nobody"))
        assert all(fixed[f].ok for f in folders), failures(list(fixed.values()))

        # A parent the account cannot enter blocks everything below it.
        (base / "in").chmod(0o700)
        blocked = by_name(run_checks(cfg, user="nobody"))
        assert not blocked["source cam"].ok
        assert f"nobody cannot enter {base / 'in'}" in blocked["source cam"].detail

        unknown = by_name(run_checks(cfg, user="no-such-account-cdml"))
        assert not unknown["user"].ok and "no account" in unknown["user"].detail
    finally:
        for p in [base, *base.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(base)


def test_untrusted_ring_entries_are_a_warning(tmp_path: Path) -> None:
    """Catalog rows pointing outside, a link named like a window, a corrupt/ that is a link."""
    import sqlite3

    from helpers.retention_data import make_window

    from cdml_edge.store.retention import RetentionRing

    host, port = PLAIN_BROKER
    cfg = load_config(good_config(tmp_path, {"url": f"mqtt://{host}:{port}"}))
    assert cfg.retention is not None
    ring_dir = cfg.retention.dir
    ring = RetentionRing(ring_dir, max_bytes=10**7, fsync=False)
    assert ring.store(*make_window("w0", 1_790_000_000.0, [("a.jpg", b"x" * 10)])).stored
    ring.close()
    conn = sqlite3.connect(ring_dir / "catalog.sqlite")
    conn.execute(
        "INSERT INTO windows VALUES ('evil', 'cam1', 'edge-1', NULL, 'image', 0, 0, 1, 0, NULL,"
        " NULL, '../../etc/passwd', 'x.window.json', 10, 'x')"
    )
    conn.commit()
    conn.close()
    (ring_dir / "20300101T000000.000Z_w9.zip").symlink_to("/dev/zero")
    (ring_dir / "corrupt").symlink_to(tmp_path)
    warn = by_name(run_checks(cfg))["retention untrusted"]
    assert warn.warn and warn.ok
    assert "3 entries" in warn.detail
    assert "'evil'" in warn.detail and "outside the ring" in warn.detail
    assert "a symbolic link" in warn.detail and "corrupt" in warn.detail


def test_room_to_grow_counts_what_the_files_take_on_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ring full of small files in whole blocks may not grow: its bound counts blocks.

    Counted by length, its 32 MiB on the disk were 0.8 MB: the doctor said it may still grow
    by 31 MiB and failed a disk with room for all that can still come.
    """
    from cdml_edge.doctor import folders
    from cdml_edge.fsio import block_size

    cfg = load_config(good_config(tmp_path, {"url": "mqtt://127.0.0.1:1"}))
    ring = cfg.retention.dir  # type: ignore[union-attr]
    ring.mkdir(parents=True)
    block = block_size(ring)
    if block < 4096:
        pytest.skip(f"blocks of {block} B: too many files to fill the bound")
    for i in range(32 * 1024**2 // block):
        (ring / f"{i:05d}.bin").write_bytes(b"x" * 100)
    room = (16 + 1 + 1) * 1024**2 + folders.RESERVE_BYTES  # spool + quarantine + 1 MiB
    monkeypatch.setattr(folders, "_free_bytes", lambda _p: room)
    checks = {c.name: c for c in folders.check_writable_dirs(cfg)}
    assert checks["retention folder"].ok, checks["retention folder"].detail
