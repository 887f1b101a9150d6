"""Dataset build over all names at once equals the per-name definitions, name for name."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from cdml_edge.data.labels import LabelError, folder_labels
from cdml_edge.data.members import is_hidden, visible, with_modality
from cdml_edge.modality import MODALITIES, modality_for

# parts that hit every edge: dot files, dot-only names, case, non-ASCII case folding
# (Kelvin sign, long s, dotted capital I), trailing dots, double extensions
PARTS = [
    "a", "b", ".x", "..", "__MACOSX", "__MACOSXy", "c.d", "É", "\u212a", "\u017f", "jpg",
    ".png", "x.PNG", "y.Jpeg", "z.tsv.", "w.csv", "q.jsonl", "p.JSON", "r.npy", "..png",
    "a.b.wav", "t.Txt", "\u0130.jpg", "a.\u017fv", "a..png", "v.tiff", "v.tif",
]  # fmt: skip


def _random_names(rng: random.Random, n: int) -> list[str]:
    names = ("/".join(rng.choice(PARTS) for _ in range(rng.randint(1, 4))) for _ in range(n))
    return list(dict.fromkeys(names))


@pytest.mark.parametrize("seed", range(40))
def test_selection_equals_per_name_definitions(seed: int) -> None:
    rng = random.Random(seed)
    names = _random_names(rng, rng.choice([1, 5, 60, 1500]))
    if seed % 3 == 0:  # the usual case: every name of one modality
        names = [n for n in names if modality_for(n) == "image"] or names
    assert visible(names) == [n for n in names if not is_hidden(n)]
    for mod in MODALITIES:
        for keep in ((mod,), (mod, "binary")):
            assert with_modality(names, keep) == [n for n in names if modality_for(n) in keep]


def test_names_holding_nul_take_the_per_name_path() -> None:
    names = ["a/x\x00.png", "b/.y.png", "c/z.wav"]
    assert with_modality(names, ("image",)) == ["a/x\x00.png", "b/.y.png"]
    assert visible(names) == ["a/x\x00.png", "c/z.wav"]


def _reference_folder(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """ImageFolder's rule, name by name: the class is the first folder below the common root.

    Or the root itself when every name sits directly in it.
    """
    parts = [n.split("/")[:-1] for n in names]
    depth = 0
    for level in zip(*parts):  # noqa: B905
        if len(set(level)) != 1:
            break
        depth += 1
    if names and all(n.count("/") == depth for n in names) and depth > 0:
        depth -= 1
    kept = [n for n in names if n.count("/") > depth]
    return kept, [n.split("/")[depth] for n in kept]


@pytest.mark.parametrize("seed", range(300))
def test_folder_labels_equal_the_per_name_rule(seed: int) -> None:
    rng = random.Random(seed)
    root = rng.choice(["", "r/", "r/s/"])
    pieces = ["a", "b", "c", "d.png", "x", "", "é"]
    names = [
        root + "/".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))
        for _ in range(rng.choice([1, 2, 3, 10, 50]))
    ]
    names = list(dict.fromkeys(names))
    kept, cls = _reference_folder(names)
    unsafe = any(n.startswith("/") for n in names) or bool({"", ".", ".."} & set(cls))
    if not kept or unsafe:  # no class, or an absolute name / a class folder '' '.' '..'
        with pytest.raises(LabelError):
            folder_labels(names)
        return
    got = folder_labels(names)
    vocab = sorted(set(cls))
    assert got.names == kept and got.classes == vocab
    assert got.targets == [vocab.index(c) for c in cls]


@pytest.mark.parametrize(
    "names",
    [
        ["cats/1.jpg", "/etc/x.jpg"],
        ["/etc/a.jpg", "/etc/b.jpg", "/srv/c.jpg"],
        ["a//1.jpg", "a/b/2.jpg"],
        ["r/cats/1.jpg", "r/../2.jpg"],
    ],
)
def test_folder_labels_refuse_absolute_names_and_empty_or_dot_classes(names: list[str]) -> None:
    """``/etc/x.jpg`` was a training item of class ``''``: refused, the member named."""
    with pytest.raises(LabelError, match=r"member '.*': .*not a training item"):
        folder_labels(names)


def test_folder_labels_with_a_given_class_list() -> None:
    names = [f"{c}/{i}.png" for i in range(5) for c in ("ok", "dent")]
    got = folder_labels(names, classes=["dent", "ok", "scratch"])
    assert got.targets == [1, 0] * 5 and got.classes == ["dent", "ok", "scratch"]
    with pytest.raises(LabelError, match="'ok/0.png' has class 'ok'.*and 4 more"):
        folder_labels(names, classes=["dent"])
