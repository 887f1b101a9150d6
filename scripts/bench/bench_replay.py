"""Replay and export benchmark: figures from one run, on the same windows.

(a) live path: per window, pack in memory (ZIP) -> ``score_window`` (reader, decode,
ONNX) -> JSON-lines output -> retention ring (fsync), as the agent does after intake;
(b) replay: the same retained windows read back from the ring and scored again by
``score_window`` into a results file; (c) training export of the ring to ZIP and
tar.zst (MB of member bytes per second). Every figure is the best of ``--repeat`` runs;
the model is a small ONNX image classifier built here, the frames are seeded PNG digits.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
from timing import best_of, clocked, ratio, rounds, timed

from cdml_edge.model.runner import ModelOverrides, load_runners
from cdml_edge.model.spec import ImageInput, ModelSpec
from cdml_edge.outputs.jsonl import JsonlOutput
from cdml_edge.retrain import export_trainset
from cdml_edge.retrain.export import ExportStats
from cdml_edge.retrain.replay import replay_to_jsonl
from cdml_edge.store.retention import RetentionRing
from cdml_edge.synth import digit_images, encode_png
from cdml_edge.window.items import Item, Window
from cdml_edge.window.pack import pack_window
from cdml_edge.window.payloads import item_id
from cdml_edge.window.score import score_window


def build_model(path: Path, size: int) -> Path:
    """A brightness classifier (GlobalAveragePool -> MatMul) with its spec in metadata."""
    from onnx import TensorProto, helper, numpy_helper

    spec = ModelSpec(
        name="bench-brightness",
        version="1.0.0",
        modality="image",
        task="classifier",
        input=ImageInput(channels=3, size=size),
        labels=["dark", "bright"],
        latent_dim=3,
    )
    w = numpy_helper.from_array(np.array([[-4 / 3, 4 / 3]] * 3, dtype=np.float32), name="W")
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["input"], ["gap"]),
            helper.make_node("Flatten", ["gap"], ["latent"]),
            helper.make_node("MatMul", ["latent", "W"], ["logits"]),
        ],
        "bench",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, size, size])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2]),
            helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["N", 3]),
        ],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for k, v in spec.to_metadata().items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    path.write_bytes(model.SerializeToString())
    return path


def make_windows(n_windows: int, per_window: int, size: int) -> list[Window]:
    images, _ = digit_images(n_windows * per_window, seed=0, size=size)
    frames = [encode_png(img) for img in images]
    t0 = 1_790_000_000.0
    out = []
    for w in range(n_windows):
        win = Window(window_id=f"cam1-bench-{w:04d}", source="cam1", opened_ts=t0 + w)
        for i in range(per_window):
            data = frames[w * per_window + i]
            name = f"frame_{w:04d}_{i:03d}.png"
            mtime_ns = int((t0 + w + i / per_window) * 1e9)
            win.items.append(
                Item(
                    "cam1",
                    name,
                    "image",
                    mtime_ns / 1e9,
                    data,
                    item_id("cam1", name, len(data), mtime_ns),
                    None,
                    len(data),
                    mtime_ns,
                )
            )
        win.closed_ts = t0 + w + 0.99
        win.nbytes = sum(len(it.data) for it in win.items)
        out.append(win)
    return out


def live_path(
    windows: list[Window],
    runners: dict,
    ring_dir: Path,
    out: Path,
    retain: bool = True,
) -> float:
    shutil.rmtree(ring_dir, ignore_errors=True)
    ring = RetentionRing(ring_dir, max_bytes=8 * 1024**3) if retain else None
    output = JsonlOutput(out, device="edge-1")
    output.start()

    def windows_through() -> None:
        for win in windows:
            packed = pack_window(win, device="edge-1", modality="image")
            outcome = score_window(
                packed.archive,
                runners,
                device="edge-1",
                archive_name=packed.name,
                pack_ms=packed.pack_ms,
            )
            output.publish_batch(outcome.messages())
            if ring is not None:
                ring.store(packed.archive, outcome.manifest)

    dt = timed(windows_through).wall
    output.stop()
    if ring is not None:
        ring.close()
    out.unlink(missing_ok=True)
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=40)
    ap.add_argument("--per-window", type=int, default=16)
    ap.add_argument("--size", type=int, default=64, help="frame and model input size")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = build_model(d / "bench.onnx", args.size)
        runners = load_runners({"image": (model, ModelOverrides())}, warm_up=True)
        windows = make_windows(args.windows, args.per_window, args.size)
        n_items = args.windows * args.per_window
        item_bytes = sum(w.nbytes for w in windows)

        # rounds interleave the two, so both see the same machine load
        live = rounds(
            {
                "bare": lambda: live_path(
                    windows, runners, d / "bare", d / "live.jsonl", retain=False
                ),
                "live": lambda: live_path(windows, runners, d / "ring", d / "live.jsonl"),
            },
            args.repeat,
        )
        t_bare, t_live = min(live["bare"]), min(live["live"])

        def replay() -> None:
            st = replay_to_jsonl(d / "ring", runners, d / "replay.jsonl")
            assert st.items == n_items, st

        t_replay = best_of(replay, args.repeat).wall

        def export(suffix: str) -> tuple[float, ExportStats]:
            es, t = clocked(
                lambda: export_trainset(d / "ring", d / f"train.{suffix}", split=(0.8, 0.1, 0.1))
            )
            assert es.exported == n_items, es
            return t.wall, es

        exports = {}
        for suffix in ("zip", "tar.zst"):
            best, es = min((export(suffix) for _ in range(args.repeat)), key=lambda r: r[0])
            exports[suffix] = (es.bytes_in / 1e6 / best, es.bytes_out)

    live_ips, replay_ips = n_items / t_live, n_items / t_replay
    print(
        f"{args.windows} windows x {args.per_window} PNG frames {args.size}x{args.size} "
        f"({item_bytes / 1e6:.1f} MB), best of {args.repeat}"
    )
    print(f"{'path':<34}{'items/s':>10}{'vs live':>10}")
    print(
        f"{'live (pack+score+output+retain)':<34}{live_ips:>10.0f}{ratio(live_ips, live_ips):>10}"
    )
    bare_ips = n_items / t_bare
    print(f"{'live without retention':<34}{bare_ips:>10.0f}{ratio(bare_ips, live_ips):>10}")
    print(
        f"{'replay (ring -> results.jsonl)':<34}{replay_ips:>10.0f}"
        f"{ratio(replay_ips, live_ips):>10}"
    )
    print(f"{'export':<34}{'MB/s':>10}{'out MB':>10}")
    for suffix, (mbps, size) in exports.items():
        print(f"{'export -> ' + suffix:<34}{mbps:>10.1f}{size / 1e6:>10.2f}")


if __name__ == "__main__":
    main()
