"""``cdml-edge doctor``: check that a configuration can actually run on this machine.

Each check returns one :class:`Check` (a name, ok or not, and a one-line detail):

* the native archive reader is built (no silent pure-Python fallback on a slow board);
* onnxruntime loads every configured model with the chosen execution provider and runs one
  real inference on an all-zero input shaped from the model's ``ModelSpec``;
* source folders exist and are readable (and writable when files are deleted or moved);
* spool, retention and quarantine folders are writable, with room for their byte bounds;
  for the calling process, or with ``user=`` for the service's account (permission bits);
  run as root without ``user=`` a warning says the writability checks prove nothing;
* the broker is reachable: TCP, the TLS handshake for ``mqtts://``, then an MQTT CONNECT.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cdml_edge.agent.outputs.mqtt.tls import (
    MqttSetupError,
    parse_broker_url,
    resolve_password,
    tls_context,
)
from cdml_edge.config import AppConfig, MqttConfig, SourceConfig
from cdml_edge.doctor.access import Account, AccountError, R, W, X
from cdml_edge.doctor.unit import DEFAULT_UNIT, uncovered
from cdml_edge.units import format_size

DEFAULT_TIMEOUT_S = 5.0
# Room kept free beyond the byte bounds (logs, the OS, a model update).
RESERVE_BYTES = 64 * 1024**2
# The unit's SupplementaryGroups=: counted for --user like the account's own groups.
UNIT_GROUPS = ("video",)


@dataclass(frozen=True)
class Check:
    """The outcome of one check."""

    name: str
    ok: bool
    detail: str
    warn: bool = False
    """A caveat, not a failure: ``ok`` stays True and the exit status is unaffected."""

    def line(self, ascii_only: bool = False) -> str:
        if self.warn:
            mark = "WARN" if ascii_only else "!"
        elif ascii_only:
            mark = "OK  " if self.ok else "FAIL"
        else:
            mark = "✓" if self.ok else "✗"
        return f"{mark} {self.name}: {self.detail}"


def run_checks(
    cfg: AppConfig,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    user: str | None = None,
    euid: int | None = None,
    unit: Path | None = None,
) -> list[Check]:
    """Every check for ``cfg``, in a stable order; never raises for a failed check.

    ``user``: judge folder access for that account (the unit's ``User=``) by permission bits
    instead of probing as this process. ``euid`` defaults to ``os.geteuid()``. ``unit``: the
    installed service file whose ``ReadWritePaths=`` must cover the folders (default: the
    one install.sh writes, when present).
    """
    account: Account | None = None
    checks: list[Check] = []
    if user is not None:
        try:
            account = Account.lookup(user, UNIT_GROUPS)
        except AccountError as exc:
            checks.append(Check("user", False, str(exc)))
        else:
            checks.append(Check("user", True, f"folder access judged for {user} "
                                f"(uid {account.uid}, {len(account.gids)} groups)"))
    elif (os.geteuid() if euid is None else euid) == 0:
        checks.append(Check(
            "privileges", True, "running as root: every folder is writable for root, so the "
            "folder checks say nothing about the service; pass --user cdml-edge (or run "
            "sudo -u cdml-edge ...)", warn=True,
        ))
    checks.append(check_native_reader())
    checks += [check_model(modality, cfg) for modality in cfg.models]
    checks += [check_source(src, timeout_s, account) for src in cfg.sources]
    checks += check_writable_dirs(cfg, account)
    if unit is None and DEFAULT_UNIT.is_file():
        unit = DEFAULT_UNIT
    if unit is not None:
        checks.append(check_unit_paths(cfg, unit))
    checks += check_broker(cfg.mqtt, timeout_s)
    return checks


def check_unit_paths(cfg: AppConfig, unit: Path) -> Check:
    """Every folder the agent writes is in the unit's ``ReadWritePaths=`` (or state dir)."""
    name = "unit paths"

    def run() -> Check:
        missing = uncovered(cfg, unit)
        if missing:
            listed = ", ".join(f"{label} {path}" for label, path in missing)
            return Check(name, False, f"{unit} keeps read-only (ProtectSystem=strict): {listed}; "
                         "rerun install.sh or add ReadWritePaths= (systemctl edit cdml-edge)")
        return Check(name, True, f"{unit}: every folder of the configuration is writable")

    return _guard(name, run)


def _guard(name: str, fn: Callable[[], Check]) -> Check:
    try:
        return fn()
    except Exception as exc:  # a check that crashes is a failed check, with the reason
        return Check(name, False, f"{type(exc).__name__}: {exc}")


# -- native reader ---------------------------------------------------------------------------


def check_native_reader() -> Check:
    name = "native reader"
    try:
        from cdml_edge import archive
    except ImportError as exc:
        return Check(name, False, f"cdml_edge.archive cannot be imported: {exc}")
    probe = getattr(archive, "native_available", None)
    if probe is None:
        return Check(name, False, "cdml_edge.archive.native_available() is missing")
    try:
        built = bool(probe())
    except Exception as exc:  # a broken build may raise on load
        return Check(name, False, f"native_available() raised {type(exc).__name__}: {exc}")
    if built:
        return Check(name, True, "C reader (cffi) is built and loads")
    return Check(
        name, False, "C reader not built: the slow Python fallback would be used "
        "(reinstall with a C compiler: pip install --force-reinstall --no-deps cdml-edge)"
    )


# -- models ----------------------------------------------------------------------------------

_SERIES = {"csv", "timeseries"}


def check_model(modality: str, cfg: AppConfig) -> Check:
    name = f"model {modality}"
    return _guard(name, lambda: _check_model(name, modality, cfg))


def _check_model(name: str, modality: str, cfg: AppConfig) -> Check:
    import onnxruntime as ort

    from cdml_edge.model.runner import InferenceError, ModelOverrides, ModelRunner

    mc = cfg.models[modality]  # type: ignore[index]
    wanted = list(mc.providers or ["CPUExecutionProvider"])
    available = ort.get_available_providers()
    missing = [p for p in wanted if p not in available]
    if missing:
        return Check(
            name, False, f"{mc.path.name}: provider {', '.join(missing)} not available in this "
            f"onnxruntime build (available: {', '.join(available)})"
        )
    overrides = ModelOverrides(
        labels=mc.labels,
        input_size=mc.input_size,
        anomaly_threshold=mc.anomaly_threshold,
        providers=wanted,
    )
    try:
        runner = ModelRunner.load(mc.path, overrides)
    except InferenceError as exc:
        msg, dup = str(exc), f"{mc.path}: "
        while msg.startswith(dup + dup):
            msg = msg[len(dup):]
        return Check(name, False, msg)
    spec = runner.spec
    if spec.modality != modality and not {spec.modality, modality} <= _SERIES:
        return Check(name, False, f"{mc.path}: a {spec.modality} model configured for {modality}")
    active = runner.session.get_providers()
    if not active or active[0] != wanted[0]:
        return Check(
            name, False, f"{mc.path.name}: asked for {wanted[0]} but onnxruntime runs it on "
            f"{', '.join(active)}"
        )
    try:
        ms = runner.warm_up()
    except InferenceError as exc:
        return Check(name, False, f"inference on a zero input failed: {exc}")
    shape = "x".join(str(d) for d in (1, *spec.input.shape()))
    return Check(
        name, True, f"{spec.name} {spec.version} ({mc.path.name}) ran a {shape} zero input on "
        f"{active[0]} in {ms:.1f} ms"
    )


# -- sources ---------------------------------------------------------------------------------


def check_source(
    src: SourceConfig, timeout_s: float = DEFAULT_TIMEOUT_S, account: Account | None = None
) -> Check:
    name = f"source {src.name}"
    if src.kind == "camera":
        return _guard(name, lambda: _check_camera(name, src, timeout_s))
    return _guard(name, lambda: _check_folder(name, src, account))


def _check_folder(name: str, src: SourceConfig, account: Account | None = None) -> Check:
    path = src.path
    assert path is not None  # the config requires it for folder sources
    if not path.exists():
        return Check(name, False, f"{path} does not exist")
    if not path.is_dir():
        return Check(name, False, f"{path} is not a folder")
    try:
        with os.scandir(path) as it:
            n = sum(1 for _ in it)
    except OSError as exc:
        return Check(name, False, f"{path} cannot be listed: {exc.strerror or exc}")
    if account is not None:
        problem = account.dir_problem(path, R | X)
        if problem:
            return Check(name, False, problem)
    if src.on_done in ("delete", "move"):
        if account is not None:
            problem = account.dir_problem(path, W | X)
        elif not os.access(path, os.W_OK | os.X_OK):
            problem = f"{path} is not writable"
        else:
            problem = None
        if problem:
            return Check(name, False, f"{problem} (on_done: {src.on_done})")
    if src.on_done == "move" and src.move_to is not None:
        problem = _dir_problem(src.move_to, account)
        if problem:
            return Check(name, False, f"move_to {problem}")
    return Check(name, True, f"{path} readable, {n} entries")


def _check_camera(name: str, src: SourceConfig, timeout_s: float) -> Check:
    url = src.url
    if isinstance(url, int) or (isinstance(url, str) and url.isdigit()):
        dev = Path(f"/dev/video{int(url)}")
        if not dev.exists():
            return Check(name, False, f"camera device {dev} does not exist")
        if not os.access(dev, os.R_OK | os.W_OK):
            return Check(name, False, f"{dev} is not accessible (add the user to 'video')")
        return Check(name, True, f"camera device {dev} accessible")
    assert isinstance(url, str)
    parts = urlsplit(url)
    if parts.scheme in ("rtsp", "http", "https"):
        default = {"rtsp": 554, "http": 80, "https": 443}[parts.scheme]
        host, port = parts.hostname or "", parts.port or default
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                pass
        except OSError as exc:
            return Check(name, False, f"{parts.scheme}://{host}:{port} unreachable: {exc}")
        return Check(name, True, f"{parts.scheme}://{host}:{port} reachable")
    path = Path(url)
    if not path.is_file():
        return Check(name, False, f"video file {path} does not exist")
    return Check(name, True, f"video file {path} readable")


# -- writable folders ------------------------------------------------------------------------


def _existing_ancestor(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _dir_problem(path: Path, account: Account | None = None) -> str | None:
    """None when ``path`` is (or can be created as) a writable folder; else why not.

    For the calling process a file is created and removed; for ``account`` the permission
    bits decide.
    """
    if path.exists():
        if not path.is_dir():
            return f"{path} is not a folder"
        if account is not None:
            return account.dir_problem(path, W | X)
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".cdml-doctor-"):
                pass
        except OSError as exc:
            return f"{path} is not writable: {exc.strerror or exc}"
        return None
    base = _existing_ancestor(path)
    if not base.is_dir():
        return f"{path} cannot be created: {base} is not a folder"
    if account is not None:
        problem = account.dir_problem(base, W | X)
        return None if problem is None else f"{path} cannot be created: {problem}"
    if not os.access(base, os.W_OK | os.X_OK):
        return f"{path} cannot be created: {base} is not writable"
    return None


def _used_bytes(path: Path) -> int:
    if not path.is_dir():
        return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def _bounded_dirs(cfg: AppConfig) -> Iterator[tuple[str, Path, int]]:
    yield "spool", cfg.spool.dir, cfg.spool.max_bytes
    if cfg.retention is not None and cfg.retention.keep != "none":
        yield "retention", cfg.retention.dir, cfg.retention.max_bytes
    yield "quarantine", cfg.quarantine.dir, cfg.quarantine.max_bytes


def check_writable_dirs(cfg: AppConfig, account: Account | None = None) -> list[Check]:
    """One check per bounded folder; free space is summed per filesystem."""
    checks: dict[str, Check] = {}
    need_by_dev: dict[int, list[tuple[str, int]]] = {}
    free_by_dev: dict[int, int] = {}
    for label, path, bound in _bounded_dirs(cfg):
        name = f"{label} folder"
        problem = _dir_problem(path, account)
        if problem:
            checks[label] = Check(name, False, problem)
            continue
        base = _existing_ancestor(path)
        dev = os.stat(base).st_dev
        free_by_dev[dev] = _free_bytes(base)
        remaining = max(0, bound - _used_bytes(path))
        need_by_dev.setdefault(dev, []).append((label, remaining))
        checks[label] = Check(name, True, f"{path} writable, bound {format_size(bound)}")
    for dev, needs in need_by_dev.items():
        total = sum(n for _, n in needs) + RESERVE_BYTES
        free = free_by_dev[dev]
        for label, _ in needs:
            c = checks[label]
            if free < total:
                others = " + ".join(lbl for lbl, _ in needs)
                checks[label] = Check(
                    c.name, False, f"{c.detail.split(' writable')[0]}: only {format_size(free)} "
                    f"free, {others} may still grow by {format_size(total - RESERVE_BYTES)} "
                    f"(+{format_size(RESERVE_BYTES)} reserve)"
                )
            else:
                checks[label] = Check(c.name, True, f"{c.detail}, {format_size(free)} free")
    return list(checks.values())


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# -- broker ----------------------------------------------------------------------------------


def check_broker(mqtt: MqttConfig | None, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Check]:
    """TCP, then the TLS handshake (the agent's own TLS context), then an MQTT CONNECT."""
    if mqtt is None:
        return [Check("broker", True, "no mqtt section: results go to the JSON-lines output")]
    if mqtt.url == "embedded":
        return [Check("broker", True, "embedded broker (runs inside the agent)")]
    try:
        address = parse_broker_url(mqtt.url)
        # The same rule as the publisher: a tls section turns TLS on for any scheme.
        tls = address.tls or mqtt.tls is not None
        ctx = tls_context(mqtt.tls) if tls else None
        password = resolve_password(mqtt)  # the agent refuses to start without it, too
    except MqttSetupError as exc:
        return [Check("broker", False, str(exc))]
    host, port = address.host, address.port
    where = f"{host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        return [Check("broker", False, f"{where} unreachable: {exc}")]
    checks: list[Check] = []
    if ctx is not None:
        try:
            with ctx.wrap_socket(sock, server_hostname=host) as tsock:
                version = tsock.version()
                cert = tsock.getpeercert() or {}
        except (ssl.SSLError, OSError, ValueError) as exc:
            sock.close()
            return [Check("broker tls", False, f"{where}: TLS handshake failed: {exc}")]
        who = _common_name(cert) or "unverified peer"
        checks.append(Check("broker tls", True, f"{where}: {version} handshake, server {who}"))
    else:
        sock.close()
    checks.append(
        _guard("broker", lambda: _mqtt_connect(mqtt, host, port, ctx, password, timeout_s))
    )
    return checks


def _common_name(cert: object) -> str | None:
    if not isinstance(cert, dict):
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def _mqtt_connect(
    mqtt: MqttConfig,
    host: str,
    port: int,
    ctx: ssl.SSLContext | None,
    password: str | None,
    timeout_s: float,
) -> Check:
    import paho.mqtt.client as paho

    v5 = (mqtt.protocol or "5") == "5"
    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2,
        client_id=f"cdml-edge-doctor-{os.getpid()}",
        protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
    )
    if mqtt.username:
        client.username_pw_set(mqtt.username, password)
    if ctx is not None:
        client.tls_set_context(ctx)
        if mqtt.tls is not None and mqtt.tls.insecure:
            client.tls_insecure_set(True)
    done = threading.Event()
    result: dict[str, str] = {}

    def on_connect(_c: object, _u: object, _f: object, rc: object, _p: object = None) -> None:
        result["rc"] = str(rc)
        result["failure"] = "1" if getattr(rc, "is_failure", False) else ""
        done.set()

    client.on_connect = on_connect
    t0 = time.perf_counter()
    try:
        client.connect(host, port, keepalive=max(5, int(mqtt.keepalive)))
    except (OSError, ssl.SSLError) as exc:
        return Check("broker", False, f"{host}:{port}: MQTT connect failed: {exc}")
    client.loop_start()
    try:
        if not done.wait(timeout_s):
            return Check("broker", False, f"{host}:{port}: no CONNACK within {timeout_s:g} s")
    finally:
        client.disconnect()
        client.loop_stop()
    ms = (time.perf_counter() - t0) * 1000
    proto = "MQTT 5" if v5 else "MQTT 3.1.1"
    if result.get("failure"):
        return Check("broker", False, f"{host}:{port}: {proto} CONNECT refused: {result['rc']}")
    return Check("broker", True, f"{host}:{port}: {proto} CONNACK in {ms:.0f} ms")
