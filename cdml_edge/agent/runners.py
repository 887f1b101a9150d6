"""The configured models, loaded and warmed up, and what they make one item cost the budget."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path

from cdml_edge.config import AppConfig
from cdml_edge.intake.budget import ByteBudget
from cdml_edge.model.runner import ModelOverrides, ModelRunner, load_runners
from cdml_edge.window.examples import fit_examples
from cdml_edge.window.score import warm_up_decoder

log = logging.getLogger(__name__)

DATA_COPIES = 4  # the item, the packed archive, the member read back, one decoded copy
RESULT_BYTES = 4096  # per item: manifest entry, result record and its JSON message
MAX_WARMUP_BATCH = 256  # the warm-up batch follows max_items up to this many rows


def load_models(cfg: AppConfig) -> dict[str, ModelRunner]:
    """Load and warm up the configured models (raises if one cannot be loaded).

    Each model is warmed up with the biggest batch its sources can send (their
    ``window.max_items``, at most ``MAX_WARMUP_BATCH``).
    """
    models: dict[str, tuple[str | Path, ModelOverrides]] = {
        k: (mc.path, ModelOverrides.from_config(mc, k)) for k, mc in cfg.models.items()
    }
    biggest: dict[str, int] = {}
    for sc in cfg.sources:
        for name in cfg.models_of(sc):
            biggest[name] = max(biggest.get(name, 1), min(sc.window.max_items, MAX_WARMUP_BATCH))
    runners = load_runners(models, warm_up=True, batch=biggest)
    fit_examples(runners)
    return runners


def window_charges(budget: ByteBudget, runners: dict[str, ModelRunner]) -> None:
    """Set what one item costs the budget, per modality, from the loaded models.

    Besides ``DATA_COPIES`` copies of its bytes an item holds, for each model of its
    modality, its prepared input, its row of the stacked batch and the intermediate copies
    made while preparing it (one more input's worth), plus ``RESULT_BYTES`` for its records.
    """
    extra: dict[str, int] = {}
    for runner in runners.values():
        extra[runner.modality] = extra.get(runner.modality, 0) + 3 * runner.input_bytes
    for modality, nbytes in extra.items():
        budget.item_extra[modality] = nbytes + RESULT_BYTES


def warm_up_decoders(modalities: Iterable[str], runners: dict[str, ModelRunner]) -> str:
    """Decode one sample per modality so the first real window pays no import cost.

    What each took comes back, for the start-up log. Nothing is compiled (the audio
    decoder needs no JIT), so a first start is as fast as any other. A failed warm-up is
    logged, never raised: it is an optimisation, not a reason to stop.
    """
    took: list[str] = []
    for modality in sorted(set(modalities)):
        t0 = time.perf_counter()
        try:
            warm_up_decoder(modality, runners)
        except Exception as exc:
            log.warning("warm-up of the %s decoder failed: %s", modality, exc)
        took.append(f"{modality} {(time.perf_counter() - t0) * 1000:.0f} ms")
    return ", ".join(took)
