"""Soak: the real agent against a real Mosquitto while faults are injected at random.

For ``CDML_SOAK_SECONDS`` (default 100 s) an injector drops files into the watched folder
(good, odd names, corrupt, FIFOs, sockets, links to a canary outside, files replaced in
flight, files still growing), the broker (a private Mosquitto on a free port) is stopped
and started again, and the small file system of spool, retention and quarantine (a tmpfs
where mounting works, else ENOSPC injected where those stores write) is filled and freed.
Then every fault ends, the agent finishes its work and stops, and the invariants are checked:

* every complete version of a regular file got its result id on MQTT, or is still on disk,
  or is in quarantine with an error event naming it — and the final version of each name
  is one of these (nothing lost); no result id the injector did not write (no half file);
* FIFOs, sockets and links were reported once each and left; the canary behind the links
  was never opened (inotify on the canary itself);
* no supervised part is dead at the end;
* ``/healthz`` told the truth: 503 ``degraded`` naming the store between each store's
  ``*_disk_full``/``*_io_error`` event and its ``*_disk_ok``, never outside a disk episode,
  ``dead_threads`` only with a ``ThreadDied`` event, 200 at the end.

The counts are printed (``-s``) for the reliability page (docs/reliability.md). ``CDML_SOAK_SEED``
replays a run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agent_runs import wait_for
from helpers.full_disk import fill
from helpers.models import brightness_classifier
from helpers.mqtt_brokers import BrokerProcess, Subscriber
from helpers.ports import free_port
from helpers.soak import Episodes, Injector, Ledger, OpenWatch, image, run_for

from cdml_edge.agent.app import Agent
from cdml_edge.config import load_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SOURCE = "cam"
DISK_BYTES = 6 * 1024**2
STORES = {"spool", "retention", "quarantine"}  # the parts on the disk the test fills


class Disk:
    """The file system of spool, retention and quarantine, which the test fills and frees."""

    def __init__(self, path: Path, mounted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path, self.mounted, self.full = path, mounted, False
        self.episodes = Episodes()
        if not mounted:
            _inject_enospc(self, monkeypatch)

    def fill(self) -> None:
        self.episodes.begin()
        self.full = True
        if self.mounted:
            fill(self.path)

    def free(self) -> None:
        if self.mounted:
            (self.path / "filler").unlink(missing_ok=True)
        self.full = False
        self.episodes.end()


def _inject_enospc(disk: Disk, mp: pytest.MonkeyPatch) -> None:
    """Where no tmpfs can be mounted: the stores' writes fail with ENOSPC while "full"."""
    from cdml_edge.intake import finishing as lifecycle
    from cdml_edge.outputs.mqtt import spool
    from cdml_edge.store import files

    def failing(module: Any, name: str) -> None:
        real = getattr(module, name)

        def call(*args: Any, **kw: Any) -> Any:
            if disk.full:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)
            return real(*args, **kw)

        mp.setattr(module, name, call)

    failing(files, "write_file")
    failing(lifecycle, "move_file")
    failing(lifecycle, "atomic_write")
    failing(spool, "atomic_write")
    failing(spool.Spool, "_write_locked")


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    path = tmp_path / "disk"
    path.mkdir()
    size = f"size={DISK_BYTES}"
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )
    print(f"[soak] spool/retention/quarantine on {'a tmpfs' if mounted else 'injected ENOSPC'}")
    yield Disk(path, mounted, monkeypatch)
    if mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _config(tmp_path: Path, disk: Path, broker: BrokerProcess, prefix: str, port: int) -> Path:
    doc = {
        "device": {"id": "soak"},
        "state_dir": str(tmp_path / "state"),
        "sources": [
            {
                "name": SOURCE,
                "kind": "folder",
                "path": str(tmp_path / "in"),
                "modality": "image",
                "window": {"seconds": "200ms", "max_items": 16},
                "on_done": "delete",
                "stable_seconds": 0.3,
            }
        ],
        "models": {"image": {"path": str(tmp_path / "brightness.onnx")}},
        "mqtt": {"url": broker.url, "topic_prefix": prefix, "protocol": broker.protocol},
        "spool": {"dir": str(disk / "spool"), "max_bytes": "2MiB"},
        "retention": {"dir": str(disk / "retention"), "max_bytes": "2MiB"},
        "quarantine": {"dir": str(disk / "quarantine"), "max_bytes": "1MiB"},
        "limits": {"max_inflight_bytes": "4MiB"},
        "health": {"interval": "1s", "metrics_port": port, "metrics_host": "127.0.0.1"},
    }
    path = tmp_path / "soak.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _healthz(port: int) -> tuple[float, int, dict[str, Any]]:
    """(time asked, status, body); status 0 when the endpoint did not answer."""
    t = time.time()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return t, resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return t, exc.code, json.loads(exc.read())
    except (OSError, ValueError) as exc:
        return t, 0, {"status": "no answer", "error": repr(exc)}


class Faults:
    """The broker and disk timers beside the injector."""

    def __init__(self, broker: BrokerProcess, disk: Disk, rng: random.Random) -> None:
        self.broker, self.disk, self.rng = broker, disk, rng
        self.outages = Episodes()

    def broker_tick(self) -> None:
        if self.rng.random() < 0.15:
            self.outages.begin()
            self.broker.stop()
            time.sleep(self.rng.uniform(1.0, 4.0))
            self.broker.start()
            self.outages.end()

    def disk_tick(self) -> None:
        if self.rng.random() < 0.12:
            self.disk.fill()
            time.sleep(self.rng.uniform(1.5, 5.0))
            self.disk.free()


def test_soak(tmp_path: Path, disk: Disk) -> None:
    seconds = float(os.environ.get("CDML_SOAK_SECONDS", "100"))
    seed = int(os.environ.get("CDML_SOAK_SEED", str(random.randrange(1 << 30))))
    print(f"[soak] seed {seed}, {seconds:.0f} s")
    rng = random.Random(seed)
    (tmp_path / "in").mkdir()
    brightness_classifier(tmp_path / "brightness.onnx")
    canary = tmp_path / "outside" / "secret.jpg"
    canary.parent.mkdir()
    canary.write_bytes(image(rng))
    broker = BrokerProcess(tmp_path / "broker").start()
    prefix, port = f"soak{uuid.uuid4().hex[:8]}", free_port()
    sub = Subscriber(broker.port, f"{prefix}/#")
    watch = OpenWatch(canary)
    cfg = _config(tmp_path, disk.path, broker, prefix, port)
    agent = Agent(load_config(cfg), cfg)
    agent.supervisor.backoff_max = 2.0
    ledger = Ledger(SOURCE)
    injector = Injector(tmp_path / "in", canary, ledger, rng)
    faults = Faults(broker, disk, random.Random(rng.random()))
    samples: list[tuple[float, int, dict[str, Any]]] = []
    stop = threading.Event()
    agent.start()
    try:
        poller = run_for(1e9, lambda: samples.append(_healthz(port)), 0.25, stop)
        threads = [
            run_for(seconds, injector.step, 0.12, stop),
            run_for(seconds, faults.broker_tick, 1.0, stop),
            run_for(seconds, faults.disk_tick, 1.0, stop),
        ]
        for t in threads:
            t.join(seconds + 60)
        injector.finish()
        assert broker.proc is not None and broker.proc.poll() is None and not disk.full
        _settle(tmp_path / "in", ledger, agent, sub)
        dead_at_end = list(agent.supervisor.dead())
        try:
            wait_for(
                lambda: samples[-1][1] == 200 and samples[-1][0] > time.time() - 2,
                timeout=30,
                what="/healthz 200 once every fault is over",
            )
        except AssertionError:
            print(f"[soak] last /healthz answers: {samples[-3:]}")
            raise
        stop.set()
        poller.join(5)
    finally:
        stop.set()
        agent.stop()
        time.sleep(1.0)  # the last messages reach the subscriber
        sub.close()
        broker.stop()
    opens = watch.events()
    watch.close()
    _check(tmp_path, ledger, sub, samples, disk, faults, agent, dead_at_end, opens)


def _regular_left(folder: Path) -> list[str]:
    out = []
    for e in os.scandir(os.fsencode(folder)):
        if e.is_file(follow_symlinks=False) and not e.name.endswith(b".tmp"):
            out.append(os.fsdecode(e.name))
    return out


def _delivered(agent: Agent) -> bool:
    """Nothing waits in the outbox, in flight or in the spool, and the broker is connected."""
    st = agent.output.stats()
    return (
        st["broker_connected"] == 1
        and st["outbox_depth"] == 0
        and st["inflight"] == 0
        and st["spool_records"] == 0
    )


def _settle(folder: Path, ledger: Ledger, agent: Agent, sub: Subscriber) -> None:
    """Wait until the agent has finished every regular file and delivered every message.

    Then until the subscriber has them too (or 120 s).
    """
    try:
        wait_for(
            lambda: not _regular_left(folder) and agent.budget.used == 0,
            timeout=120,
            what="every dropped file finished",
        )
    except AssertionError:
        print(f"[soak] still on disk after 120 s: {_regular_left(folder)[:20]}")
    try:
        wait_for(lambda: _delivered(agent), timeout=60, what="outbox and spool delivered")
        wait_for(
            lambda: (
                ledger.all_ids() & set(sub.ids(f"/{SOURCE}/result")) >= _deleted_ids(ledger, folder)
            ),
            timeout=30,
            what="the subscriber has them",
        )
    except AssertionError as exc:
        print(f"[soak] {exc}; output: {agent.output.stats()}")


def _deleted_ids(ledger: Ledger, folder: Path) -> set[str]:
    """Ids of the final good versions that are no longer in the folder."""
    base = os.fsencode(folder)
    return {
        v.id
        for v in ledger.finals()
        if not v.corrupt and not os.path.lexists(os.path.join(base, v.raw))
    }


def _once(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each event once: a message sent again after a broker outage has the same ``seq``."""
    seen: set[tuple[str, str, int]] = set()
    out = []
    for e in events:
        key = (e["source"], e["error_type"], e["seq"])
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _quarantined(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Item shown name -> sha256 of the quarantined files its error events point at."""
    out: dict[str, list[str]] = {}
    for e in events:
        q = e.get("quarantined_path")
        if q and os.path.exists(q):
            out.setdefault(e["item"], []).append(hashlib.sha256(Path(q).read_bytes()).hexdigest())
    return out


def _fate(v: Any, folder: Path, scored: set[str], quarantined: dict[str, list[str]]) -> str:
    if v.id in scored:
        return "scored"
    path = os.path.join(os.fsencode(folder), v.raw)
    if os.path.isfile(path) and not os.path.islink(path):
        with open(path, "rb") as fh:
            if fh.read() == v.data:
                return "on_disk"
    if v.sha256 in quarantined.get(v.shown, []):
        return "quarantined"
    return "lost"


def _check(
    tmp_path: Path,
    ledger: Ledger,
    sub: Subscriber,
    samples: list[Any],
    disk: Disk,
    faults: Faults,
    agent: Agent,
    dead_at_end: list[str],
    opens: int,
) -> None:
    results = sub.on(f"/{SOURCE}/result")
    errors = _once(sub.on(f"/{SOURCE}/error") + sub.on("/agent/error"))
    scored = {r["id"] for r in results}
    quarantined = _quarantined(errors)
    folder = tmp_path / "in"
    finals = ledger.finals()
    fates = [_fate(v, folder, scored, quarantined) for v in finals]
    every = [v for vs in ledger.versions.values() for v in vs]
    figures = _figures(ledger, results, errors, every, fates, samples, disk, faults, agent)
    print("[soak] " + json.dumps(figures, indent=1))
    lost = [v.shown for v, f in zip(finals, fates, strict=True) if f == "lost"]
    for name in lost[:5]:
        vs = next(vs for vs in ledger.versions.values() if vs[-1].shown == name)
        print(
            f"[soak] lost {name!r}: versions {[v.id for v in vs]}, results "
            f"{[(r['id'], r['window_id']) for r in results if r['item'] == name]}, events "
            f"{[(e['error_type'], e['message']) for e in errors if e['item'] == name]}"
        )
    assert not lost, f"final versions neither scored, on disk nor quarantined: {lost[:10]}"
    phantom = scored - ledger.all_ids()
    assert not phantom, f"results for versions never written whole: {len(phantom)}"
    assert not [v.shown for v in every if v.corrupt and v.id in scored], "a corrupt file scored"
    _check_specials(ledger, errors, folder, results, opens)
    assert dead_at_end == [], dead_at_end
    _check_health(samples, errors, disk)


def _check_specials(
    ledger: Ledger,
    errors: list[dict[str, Any]],
    folder: Path,
    results: list[dict[str, Any]],
    opens: int,
) -> None:
    from cdml_edge.fsio import display_name

    want = {"fifo": "NotRegularFile", "socket": "NotRegularFile", "link": "LinkRefused"}
    for raw, kind in ledger.specials.items():
        shown = display_name(os.fsdecode(raw))
        got = [e for e in errors if e["item"] == shown and e["error_type"] == want[kind]]
        assert len(got) == 1, (shown, kind, [(e["seq"], e["ts"]) for e in got])
        assert os.path.lexists(os.path.join(os.fsencode(folder), raw)), f"{shown} was moved"
        assert not [r for r in results if r["item"] == shown], f"{shown} was scored"
    assert opens == 0, f"the canary outside the watched folder was opened {opens} times"


def _check_health(samples: list[Any], errors: list[dict[str, Any]], disk: Disk) -> None:
    """503 ``degraded`` exactly while a store reported a disk fault (± the poll period)."""
    spans: dict[str, list[list[float]]] = {}
    for e in sorted(errors, key=lambda e: e["ts"]):
        store, _, kind = e["error_type"].partition("_")
        if kind in ("disk_full", "io_error"):
            if not spans.get(store) or spans[store][-1][1] != float("inf"):
                spans.setdefault(store, []).append([e["ts"], float("inf")])
        elif kind == "disk_ok" and spans.get(store):
            spans[store][-1][1] = min(spans[store][-1][1], e["ts"])
    slack = 0.6
    for t, code, body in samples:
        named = set(body.get("degraded", {})) & STORES
        for store, ss in spans.items():
            inside = any(a + slack <= t <= b - slack for a, b in ss)
            near = any(a - slack <= t <= b + slack for a, b in ss)
            assert not inside or store in named, (t, store, code, body)
            assert store not in named or near, (t, store, "degraded outside its episode")
        assert code == 200 or body["status"] != "ok", body
        if named:
            assert code == 503 and disk.episodes.covers(t, grace=15), (t, body)
        assert code != 0, f"/healthz did not answer at {t}: {body}"
    deaths = {e["message"].split()[0] for e in errors if e["error_type"] == "ThreadDied"}
    for _t, _code, body in samples:
        assert set(body.get("dead_threads", [])) <= deaths, body
    assert samples[-1][1] == 200, samples[-1]


def _figures(
    ledger: Ledger,
    results: list[Any],
    errors: list[Any],
    every: list[Any],
    fates: list[str],
    samples: list[Any],
    disk: Disk,
    faults: Faults,
    agent: Agent,
) -> dict[str, Any]:
    ids = [r["id"] for r in results]
    kinds: dict[str, int] = {}
    for e in errors:
        kinds[e["error_type"]] = kinds.get(e["error_type"], 0) + 1
    codes: dict[str, int] = {}
    for _t, _c, body in samples:
        codes[body["status"]] = codes.get(body["status"], 0) + 1
    return {
        "actions": dict(sorted(ledger.actions.items())),
        "names": len(ledger.versions),
        "versions_written": len(every),
        "specials": len(ledger.specials),
        "final_versions": {f: fates.count(f) for f in ("scored", "quarantined", "on_disk", "lost")},
        "versions_scored": len({v.id for v in every} & set(ids)),
        "result_messages": len(ids),
        "duplicate_messages": len(ids) - len(set(ids)),
        "error_events": dict(sorted(kinds.items())),
        "broker_outages": len(faults.outages.spans),
        "disk_full_episodes": len(disk.episodes.spans),
        "healthz_samples": codes,
        "thread_deaths": dict(agent.supervisor.restarts),
        "output": {
            k: v
            for k, v in agent.output.stats().items()
            if k
            in (
                "published",
                "acked",
                "spooled",
                "drained",
                "reconnects",
                "dropped",
                "spool_io_errors",
            )
        },
        "lifecycle": {
            "deleted": agent.lifecycle.deleted,
            "changed": agent.lifecycle.changed,
            "gone": agent.lifecycle.gone,
            "quarantined": agent.lifecycle.quarantined,
        },
    }
