"""CDMLStreamDataset over real ZIP and tar.zst archives: items, decoding, labels, cache, shard."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from helpers.dataset_data import COLOURS, class_images, wav, write

from cdml_edge.data.cache import ByteLRU
from cdml_edge.data.labels import LabelError
from cdml_edge.decode import DecodeError, decode_image


@pytest.fixture(scope="module", params=["zip", "tar.zst"])
def pets(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    items = class_images()
    items.append(
        (
            "pets/labels.csv",
            b"name,label\n"
            + b"".join(f"{n},{n.split('/')[1]}\n".encode() for n, _ in class_images()),
        )
    )
    items.append(("pets/README.txt", b"three classes of solid colours\n"))
    return write(tmp_path_factory.mktemp("pets") / f"pets.{request.param}", items)


def test_raw_bytes_by_default_and_pathlike(pets: Path) -> None:
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    ds = CDMLStreamDataset(pets)  # PathLike
    expected = dict(class_images())
    expected_names = [*expected, "pets/labels.csv", "pets/README.txt"]
    assert ds.names == expected_names and len(ds) == len(expected_names)
    assert ds[0] == expected["pets/cat/00.jpg"] and ds[-1].startswith(b"three")
    batch = next(iter(DataLoader(ds, batch_size=5)))
    assert batch == [expected[n] for n in ds.names[:5]]  # default collate keeps bytes


def test_images_float_chw_rgb_resized(pets: Path) -> None:
    import torch

    from cdml_edge import CDMLStreamDataset

    ds = CDMLStreamDataset(str(pets), is_image=True, target_size=(24, 16))
    assert len(ds) == 12  # only the images
    x = ds[0]
    assert x.dtype == torch.float32 and x.shape == (3, 16, 24)
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    ref = decode_image(ds.read(0), target_size=(24, 16))
    torch.testing.assert_close(x, torch.from_numpy(ref).permute(2, 0, 1).float() / 255)
    r, g, b = x.mean(dim=(1, 2)).tolist()
    assert r > 0.7 and b < 0.3  # cat is red: RGB order, not BGR
    assert CDMLStreamDataset(pets, modality="image", target_size=20)[5].shape == (3, 20, 20)


def test_transform_gets_uint8_hwc_rgb(pets: Path) -> None:
    import torch

    from cdml_edge import CDMLStreamDataset

    seen: list[tuple[type, str, tuple[int, ...]]] = []

    def spy(arr: np.ndarray) -> torch.Tensor:  # the contract torchvision's ToTensor relies on
        seen.append((type(arr), str(arr.dtype), arr.shape))
        return torch.from_numpy(arr.copy()).permute(2, 0, 1)

    ds = CDMLStreamDataset(pets, is_image=True, transform=spy, target_size=32)
    out = ds[4]
    assert seen == [(np.ndarray, "uint8", (32, 32, 3))] and out.dtype == torch.uint8
    assert int(out[2].float().mean()) > 180  # dog is blue, channel 2


def test_folder_labels_like_imagefolder(pets: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    ds = CDMLStreamDataset(pets, is_image=True, target_size=16, labels="folder")
    assert ds.classes == sorted(COLOURS) and ds.class_to_idx == {"cat": 0, "dog": 1, "eel": 2}
    assert ds.targets == [0] * 4 + [1] * 4 + [2] * 4
    x, y = next(iter(DataLoader(ds, batch_size=12, shuffle=False)))
    assert x.shape == (12, 3, 16, 16) and y.dtype == torch.int64
    # every image's dominant channel agrees with its label
    dominant = x.mean(dim=(2, 3)).argmax(dim=1)
    assert dominant.tolist() == [{0: 0, 1: 2, 2: 1}[int(c)] for c in y]
    assert ds.samples[5] == ("pets/dog/01.jpg", 1)


def test_labels_callable_mapping_and_members(pets: Path, tmp_path: Path) -> None:
    from cdml_edge import CDMLStreamDataset

    by_fn = CDMLStreamDataset(pets, is_image=True, labels=lambda n: n.split("/")[1])
    assert by_fn.classes == ["cat", "dog", "eel"] and by_fn.targets[-1] == 2
    by_csv = CDMLStreamDataset(pets, is_image=True, labels="pets/labels.csv")
    assert by_csv.targets == by_fn.targets and by_csv.classes == by_fn.classes
    mapping = {"pets/dog/00.jpg": 1.5, "pets/eel/03.jpg": -2.0}
    by_map = CDMLStreamDataset(pets, labels=mapping)
    assert by_map.names == list(mapping) and by_map.targets == [1.5, -2.0]
    local = tmp_path / "labels.json"
    local.write_text(json.dumps({"dog/00.jpg": 3}))  # keys below the wrapping folder work too
    assert CDMLStreamDataset(pets, is_image=True, labels=str(local)).samples == [
        ("pets/dog/00.jpg", 3)
    ]
    local.write_text(json.dumps({"00.jpg": 3}))  # a base name of three members names none
    with pytest.raises(LabelError, match="matches 3 members"):
        CDMLStreamDataset(pets, is_image=True, labels=str(local))
    with pytest.raises(LabelError, match="missing.jpg"):
        CDMLStreamDataset(pets, labels={"pets/missing.jpg": 0})
    # raw mode with a labels member: that member is not an item
    raw = CDMLStreamDataset(pets, labels="pets/labels.csv")
    assert "pets/labels.csv" not in raw.names and len(raw) == 12


def test_bad_member_raises_decode_error(tmp_path: Path) -> None:
    from cdml_edge import CDMLStreamDataset

    good = class_images(1)[0][1]
    path = write(tmp_path / "bad.zip", [("a.jpg", good), ("b.jpg", good[: len(good) // 2])])
    ds = CDMLStreamDataset(path, is_image=True)
    assert ds[0].shape[0] == 3
    with pytest.raises(DecodeError) as err:
        ds[1]
    assert err.value.member == "b.jpg"


def test_other_modalities_collate(tmp_path: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    items = [(f"mic/{i}.wav", wav(0.3 + 0.1 * i, 300 + 50 * i)) for i in range(3)]
    for i in range(3):
        rows = "".join(f"{j},{j * i}\n" for j in range(3 + i))
        items.append((f"s/{i}.csv", f"t,v\n{rows}".encode()))
    items += [(f"e/{i}.json", json.dumps({"id": i, "temp": 20.0 + i}).encode()) for i in range(3)]
    items += [(f"n/{i}.txt", f"note {i}".encode()) for i in range(3)]
    path = write(tmp_path / "mixed.zip", items)

    audio = CDMLStreamDataset(path, modality="audio", n_mfcc=13, fixed_length=40)
    a = next(iter(DataLoader(audio, batch_size=3)))
    assert a.shape == (3, 13, 40) and a.dtype == torch.float32
    assert not torch.equal(a[0], a[1])
    csv_ds = CDMLStreamDataset(path, modality="csv", fixed_length=4)
    c = next(iter(DataLoader(csv_ds, batch_size=3)))
    assert c.shape == (3, 4, 2) and c[2, 3].tolist() == [3.0, 6.0]
    assert c[0, 3].tolist() == [0.0, 0.0]  # padded row
    j = next(iter(DataLoader(CDMLStreamDataset(path, modality="json"), batch_size=3)))
    assert [json.loads(v) for v in j] == [{"id": i, "temp": 20.0 + i} for i in range(3)]
    temps = CDMLStreamDataset(path, modality="json", transform=lambda v: v["temp"])
    assert next(iter(DataLoader(temps, batch_size=3))).tolist() == [20.0, 21.0, 22.0]
    t = next(iter(DataLoader(CDMLStreamDataset(path, modality="text"), batch_size=3)))
    assert t == ["note 0", "note 1", "note 2"]


def test_in_memory_archive_bytes(pets: Path) -> None:
    import torch

    from cdml_edge import CDMLStreamDataset

    ds = CDMLStreamDataset(pets.read_bytes(), is_image=True, labels="folder")
    assert len(ds) == 12 and ds[11][1] == 2
    clone = pickle.loads(pickle.dumps(ds))
    assert torch.equal(clone[3][0], ds[3][0])


def test_pickle_after_reads_reopens(pets: Path) -> None:
    import torch

    from cdml_edge import CDMLStreamDataset

    ds = CDMLStreamDataset(pets, is_image=True, target_size=8)
    first = ds[0]
    state = pickle.dumps(ds)
    assert len(state) < 10_000  # names and options travel, not the archive or the cache
    clone = pickle.loads(state)
    assert torch.equal(clone[0], first) and clone.cache_info().misses == 1


def test_cache_bounded_by_real_bytes(pets: Path) -> None:
    from cdml_edge import CDMLStreamDataset

    ds = CDMLStreamDataset(pets, cache_size_mb=0.004)  # 4194 bytes: a few ~700-byte JPEGs
    sizes = [len(ds.read(i)) for i in range(12)]
    info = ds.cache_info()
    assert info.misses == 12 and info.hits == 0
    assert info.bytes <= info.capacity == int(0.004 * 1024 * 1024)
    assert info.bytes == sum(sizes[-info.items :]) and info.evictions == 12 - info.items
    ds.read(11)
    assert ds.cache_info().hits == 1
    off = CDMLStreamDataset(pets, cache_size_mb=0)
    off.read(0)
    off.read(0)
    assert off.cache_info().bytes == 0 and off.cache_info().items == 0


def test_byte_lru_policy() -> None:
    lru = ByteLRU(10)
    assert lru.put("a", b"1234") and lru.put("b", b"1234")
    assert lru.get("a") == b"1234"  # a is now most recent
    assert lru.put("c", b"1234")  # evicts b, the least recently used
    assert "b" not in lru and "a" in lru and lru.nbytes == 8
    assert not lru.put("big", b"x" * 11) and "big" not in lru
    info = lru.info()
    assert (info.hits, info.misses, info.evictions) == (1, 0, 1)
    assert lru.get("b") is None and lru.info().misses == 1
    with pytest.raises(ValueError):
        ByteLRU(-1)


def test_getitems_batches_reads(pets: Path) -> None:
    import torch

    from cdml_edge import CDMLStreamDataset

    ds = CDMLStreamDataset(pets, is_image=True, target_size=8, labels="folder")
    batch = ds.__getitems__([0, 5, 11])
    assert [y for _, y in batch] == [0, 1, 2]
    assert all(torch.equal(x, ds[i][0]) for (x, _), i in zip(batch, [0, 5, 11], strict=True))
    assert [y for _, y in ds.__getitems__([-1, -12])] == [2, 0]
    for bad in ([12], [-13], [0, -99]):
        with pytest.raises(IndexError, match="out of range"):
            ds.__getitems__(bad)


@pytest.mark.parametrize("world", [2, 3])
def test_shard_matches_distributed_sampler(pets: Path, world: int) -> None:
    from torch.utils.data import DistributedSampler

    from cdml_edge import CDMLStreamDataset

    ds = CDMLStreamDataset(pets, is_image=True, labels="folder")
    shards = [ds.shard(r, world) for r in range(world)]
    for r, shard in enumerate(shards):
        sampler = DistributedSampler(ds, num_replicas=world, rank=r, shuffle=False)
        assert shard.names == [ds.names[i] for i in sampler]
        assert shard.targets == [ds.targets[i] for i in sampler]  # type: ignore[index]
    assert len({len(s) for s in shards}) == 1
    covered = {n for s in shards for n in s.names}
    assert covered == set(ds.names)
    assert ds.shard(1, world).names == shards[1].names  # deterministic
    dropped = [ds.shard(r, 5, drop_last=True) for r in range(5)]
    assert sum(len(s) for s in dropped) == 10 and len({n for s in dropped for n in s.names}) == 10


def test_errors_for_bad_arguments(pets: Path) -> None:
    from cdml_edge import CDMLStreamDataset

    with pytest.raises(ValueError, match="no audio members"):
        CDMLStreamDataset(pets, modality="audio")
    with pytest.raises(ValueError):
        CDMLStreamDataset(pets, modality="video")
    with pytest.raises(ValueError):
        CDMLStreamDataset(pets, is_image=True, modality="audio")
    with pytest.raises(IndexError):
        CDMLStreamDataset(pets)[99]
    assert len(CDMLStreamDataset(pets, include="*/dog/*")) == 4


def test_include_with_modality(tmp_path: Path) -> None:
    from cdml_edge import CDMLStreamDataset

    frame = class_images(1)[0][1]
    path = write(
        tmp_path / "cams.zip",
        [
            ("cam/a.raw", frame),
            ("cam/b.jpg", frame),
            ("cam/labels.csv", b"name,label\n"),
            ("x/c.jpg", frame),
        ],
    )
    ds = CDMLStreamDataset(path, is_image=True, include="cam/*")
    assert ds.names == ["cam/a.raw", "cam/b.jpg"]  # unknown extension kept, the CSV is not
    assert ds[0].shape == (3, 32, 48)
    assert CDMLStreamDataset(path, include=lambda n: n.endswith(".csv")).names == ["cam/labels.csv"]


def test_default_collate_unequal_lengths_and_heterogeneous_json(tmp_path: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    from cdml_edge import CDMLStreamDataset

    seconds = [0.2, 0.5, 0.35, 0.8]
    items = [(f"mic/{i}.wav", wav(s, 300 + 50 * i)) for i, s in enumerate(seconds)]
    rows = [2, 5, 3, 4]
    for i, n in enumerate(rows):
        body = "".join(f"{j},{j + 10 * i}\n" for j in range(n))
        items.append((f"s/{i}.csv", f"t,v\n{body}".encode()))
    records = [{"id": 0}, {"temp": 1.5, "tags": ["a", "b"]}, [1, 2, 3], "plain", {"id": None}]
    items += [(f"e/{i}.json", json.dumps(r).encode()) for i, r in enumerate(records)]
    path = write(tmp_path / "ragged.zip", items)

    audio = CDMLStreamDataset(path, modality="audio", n_mfcc=13, labels=lambda n: n[4])
    lengths = [audio[i][0].shape[-1] for i in range(4)]
    assert len(set(lengths)) == 4  # the items themselves are never padded
    batches = list(DataLoader(audio, batch_size=2))
    for b, (x, y) in enumerate(batches):
        pair = lengths[2 * b : 2 * b + 2]
        assert x.shape == (2, 13, max(pair)) and y.tolist() == [2 * b, 2 * b + 1]
        for k in range(2):  # exact item, then zeros
            torch.testing.assert_close(x[k, :, : pair[k]], audio[2 * b + k][0])
            assert not x[k, :, pair[k] :].any()
    wave = CDMLStreamDataset(path, modality="audio", audio_mode="waveform", sample_rate=8000)
    assert next(iter(DataLoader(wave, batch_size=4))).shape == (4, int(0.8 * 8000))

    csv_ds = CDMLStreamDataset(path, modality="csv")
    (c,) = list(DataLoader(csv_ds, batch_size=4, num_workers=0))
    assert c.shape == (4, 5, 2)
    assert c[2, :3, 1].tolist() == [20.0, 21.0, 22.0] and not c[2, 3:].any()
    assert [csv_ds[i].shape[0] for i in range(4)] == rows

    js = CDMLStreamDataset(path, modality="json")
    (j,) = list(DataLoader(js, batch_size=5))
    assert [json.loads(v) for v in j] == records
