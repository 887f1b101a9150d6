"""Tier 2 model, encoders, CDMLLoss and the latent-space operations."""

from __future__ import annotations

import numpy as np
import pytest


def test_tier2_defaults_fit_the_parameter_budget() -> None:
    from cdml_edge.nn import CDMLTrainTier2

    model = CDMLTrainTier2()
    assert model.config == {
        "latent_dim": 64,
        "num_classes": 10,
        "in_channels": 3,
        "image_size": 32,
        "width": 32,
    }
    assert model.num_parameters() <= 1_000_000
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("size,channels", [(64, 3), (32, 3), (32, 1)])
def test_tier2_compress_decompress_classify(size: int, channels: int) -> None:
    import torch

    from cdml_edge.nn import CDMLTrainTier2

    model = CDMLTrainTier2(latent_dim=16, num_classes=4, in_channels=channels, image_size=size)
    x = torch.randn(5, channels, size, size)
    z = model.compress(x)
    assert z.shape == (5, 16)
    assert model.decompress(z).shape == x.shape
    assert model.classifier(z).shape == (5, 4)
    out = model(x, return_dict=True)
    assert set(out) == {"latent", "logits", "recon"}
    torch.testing.assert_close(out["latent"], z)


def test_tier2_rejects_odd_sizes_and_headless_classifier() -> None:
    import torch

    from cdml_edge.nn import CDMLTrainTier2

    with pytest.raises(ValueError, match="multiple of 16"):
        CDMLTrainTier2(image_size=40)
    model = CDMLTrainTier2(num_classes=0, image_size=32)
    assert "logits" not in model.outputs(torch.randn(2, 3, 32, 32))
    with pytest.raises(RuntimeError, match="without a classifier head"):
        model.classifier(torch.randn(2, 64))


# encoder class, its arguments, the shape of an input batch (built in the test, with torch)
ENCODERS = {
    "audio-mfcc": (
        "AudioEncoder",
        {"n_mfcc": 20, "frames": 32, "latent_dim": 8, "num_classes": 3},
        (4, 20, 32),
    ),
    "audio-waveform": (
        "AudioEncoder",
        {"latent_dim": 8, "num_classes": 3, "input": "waveform"},
        (4, 16000),
    ),
    "timeseries": (
        "TimeSeriesEncoder",
        {"channels": 3, "window": 128, "latent_dim": 8, "num_classes": 3},
        (4, 3, 128),
    ),
    "tabular": ("TabularEncoder", {"in_features": 6, "latent_dim": 8, "num_classes": 3}, (4, 6, 1)),
}


@pytest.mark.parametrize("encoder", list(ENCODERS))
def test_encoders_share_the_latent_interface(encoder: str) -> None:
    import torch

    from cdml_edge.nn import AudioEncoder, TabularEncoder, TimeSeriesEncoder, build_model

    cls, kwargs, shape = ENCODERS[encoder]
    encoders = {
        "AudioEncoder": AudioEncoder,
        "TimeSeriesEncoder": TimeSeriesEncoder,
        "TabularEncoder": TabularEncoder,
    }
    model, x = encoders[cls](**kwargs), torch.randn(*shape)
    out = model(x, return_dict=True)
    assert out["latent"].shape == (4, 8)
    assert out["logits"].shape == (4, 3)
    assert "recon" not in out
    with pytest.raises(NotImplementedError, match="no decoder"):
        model.decompress(out["latent"])  # type: ignore[operator]
    clone = build_model(type(model).__name__, model.config)  # type: ignore[arg-type]
    assert clone.num_parameters() == model.num_parameters()  # type: ignore[operator]


@pytest.mark.parametrize("encoder", [*ENCODERS, "tier2"])
def test_calling_a_model_gives_its_code(encoder: str) -> None:
    """cdmltrain's ``z = encoder(x)``: a ``(B, latent_dim)`` tensor; the dict by option."""
    import torch

    from cdml_edge.nn import AudioEncoder, CDMLTrainTier2, TabularEncoder, TimeSeriesEncoder

    cls, kwargs, shape = ENCODERS.get(encoder, ("CDMLTrainTier2", {"latent_dim": 8}, (4, 3072)))
    built = {
        "AudioEncoder": AudioEncoder,
        "TimeSeriesEncoder": TimeSeriesEncoder,
        "TabularEncoder": TabularEncoder,
        "CDMLTrainTier2": CDMLTrainTier2,
    }
    model, x = built[cls](**kwargs).eval(), torch.randn(*shape)
    z = model(x)
    assert isinstance(z, torch.Tensor) and z.shape == (4, 8)
    torch.testing.assert_close(z, model.compress(x))
    out = model(x, return_dict=True)
    assert isinstance(out, dict) and {"latent", "logits"} <= set(out)
    torch.testing.assert_close(out["latent"], z)
    assert set(model.outputs(x)) == set(out)


def test_build_model_unknown_name() -> None:
    from cdml_edge.nn import build_model

    with pytest.raises(KeyError, match="Nope"):
        build_model("Nope", {})


def test_loss_weights_and_missing_terms() -> None:
    import torch

    from cdml_edge.nn import CDMLLoss

    x = torch.zeros(2, 3)
    out = {
        "latent": torch.ones(2, 4),
        "recon": torch.ones(2, 3),
        "logits": torch.tensor([[10.0, -10.0], [-10.0, 10.0]]),
    }
    y = torch.tensor([0, 1])
    total, parts = CDMLLoss(recon_weight=2.0, ce_weight=1.0, latent_weight=0.5)(out, x, y)
    assert parts["recon"] == pytest.approx(2.0)
    assert parts["ce"] == pytest.approx(0.0, abs=1e-6)
    assert parts["latent"] == pytest.approx(2.0)  # 0.5 * ||1||^2 over 4 dims
    assert float(total) == pytest.approx(4.0, abs=1e-5)
    _, only_recon = CDMLLoss()(out, x, None)
    assert set(only_recon) == {"recon"}
    with pytest.raises(ValueError, match="no loss term"):
        CDMLLoss()({"latent": torch.ones(2, 4)}, x, None)
    with pytest.raises(TypeError, match=r"loss\(model\(x, return_dict=True\), x, y\)"):
        CDMLLoss()(torch.ones(2, 4), x, None)  # type: ignore[arg-type]  # model(x): the code only


def test_prototypes_and_nearest() -> None:
    import torch

    from cdml_edge.nn import class_prototypes, nearest_neighbours
    from cdml_edge.nn.cda import nearest_prototype

    z = torch.tensor([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [12.0, 10.0]])
    y = torch.tensor([0, 0, 1, 1])
    protos = class_prototypes(z, y, 3)
    torch.testing.assert_close(protos[:2], torch.tensor([[1.0, 0.0], [11.0, 10.0]]))
    assert torch.isnan(protos[2]).all()
    assert nearest_prototype(torch.tensor([[0.5, 0.5], [9.0, 9.0]]), protos[:2]).tolist() == [0, 1]
    d, idx = nearest_neighbours(torch.tensor([[11.9, 10.0]]), z, k=2)
    assert idx.tolist() == [[3, 2]]
    assert d[0, 0].item() == pytest.approx(0.1, abs=1e-5)
    with pytest.raises(ValueError, match="exceeds"):
        nearest_neighbours(z, z, k=5)


def test_interpolate_endpoints_and_midpoint() -> None:
    import torch

    from cdml_edge.nn import interpolate

    a, b = torch.zeros(3), torch.tensor([2.0, 4.0, 6.0])
    path = interpolate(a, b, 5)
    assert path.shape == (5, 3)
    torch.testing.assert_close(path[0], a)
    torch.testing.assert_close(path[-1], b)
    torch.testing.assert_close(path[2], torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError):
        interpolate(a, b, 1)


def test_anomaly_scorer_threshold_and_head() -> None:
    import torch

    from cdml_edge.nn import AnomalyHead, AnomalyScorer, TabularEncoder

    g = torch.Generator().manual_seed(0)
    normal = torch.randn(2000, 8, generator=g) * torch.tensor([1.0, 2, 3, 4, 1, 1, 1, 1]) + 5
    scorer = AnomalyScorer.fit(normal, quantile=0.95)
    fresh = torch.randn(2000, 8, generator=g) * torch.tensor([1.0, 2, 3, 4, 1, 1, 1, 1]) + 5
    fpr = scorer.is_anomalous(fresh).float().mean().item()
    assert 0.02 < fpr < 0.08  # the 95 % quantile holds on fresh normal data
    far = fresh + 6.0
    assert scorer.is_anomalous(far).float().mean().item() > 0.99
    restored = AnomalyScorer.from_state(scorer.state())
    torch.testing.assert_close(restored.score(fresh), scorer.score(fresh))

    model = TabularEncoder(in_features=4, latent_dim=8).eval()
    x = torch.randn(16, 4, generator=g)
    with torch.no_grad():
        codes = model.compress(x)
        head_scorer = AnomalyScorer.fit(codes)
        score, latent = AnomalyHead(model, head_scorer)(x)
    torch.testing.assert_close(latent, codes)
    torch.testing.assert_close(score, head_scorer.score(codes))


def test_auroc_known_values() -> None:
    from cdml_edge.nn import auroc

    assert auroc(np.array([0.1, 0.2]), np.array([0.3, 0.4])) == 1.0
    assert auroc(np.array([0.3, 0.4]), np.array([0.1, 0.2])) == 0.0
    assert auroc(np.array([1.0, 1.0]), np.array([1.0])) == 0.5
    assert auroc(np.array([0.1, 0.5]), np.array([0.3])) == 0.5
    with pytest.raises(ValueError):
        auroc(np.array([]), np.array([1.0]))


def test_seed_argument_names_are_aliases_kept_out_of_the_config() -> None:
    from cdml_edge.nn import TabularEncoder, TimeSeriesEncoder, build_model

    tab = TabularEncoder(input_dim=20, latent_dim=8)
    assert tab.config["in_features"] == 20 and "input_dim" not in tab.config
    with pytest.raises(TypeError, match="disagree"):
        TabularEncoder(in_features=4, input_dim=20)
    with pytest.raises(TypeError, match="input_dim"):
        TabularEncoder()
    ts = TimeSeriesEncoder(input_features=8, hidden_size=16, latent_dim=8)
    assert ts.config == {
        "channels": 8,
        "window": 256,
        "latent_dim": 8,
        "num_classes": 0,
        "width": 16,
        "layout": "channels_last",
    }
    assert TimeSeriesEncoder(channels=8).config.get("layout") is None  # ours: channels first
    for model in (tab, ts):
        clone = build_model(type(model).__name__, model.config)
        assert clone.config == model.config
    with pytest.raises(ValueError, match="layout"):
        TimeSeriesEncoder(layout="nhwc")


def test_audio_encoder_input_follows_the_arguments() -> None:
    import torch

    from cdml_edge.nn import AudioEncoder

    assert AudioEncoder(latent_dim=8).config["input"] == "waveform"  # the seed's default
    assert AudioEncoder(in_channels=1, input_length=16000).config["input"] == "waveform"
    assert AudioEncoder(20, 32).config["input"] == "mfcc"  # MFCC sizes given: MFCC input
    assert AudioEncoder(n_mfcc=13).config["input"] == "mfcc"
    with pytest.raises(ValueError, match="mono"):
        AudioEncoder(in_channels=2)
    model = AudioEncoder(latent_dim=8).eval()
    x = torch.randn(2, 16000)
    torch.testing.assert_close(model.compress(x), model.compress(x[:, None, :]))


def test_seed_loss_weights() -> None:
    import torch

    from cdml_edge.nn import CDMLLoss

    loss = CDMLLoss(alpha=2.0, beta=0.5, gamma=0.1)
    assert (loss.ce_weight, loss.recon_weight, loss.sparsity_weight) == (2.0, 0.5, 0.1)
    z = torch.tensor([[1.0, -3.0]])
    out = {"latent": z, "logits": torch.tensor([[0.0, 0.0]]), "recon": torch.zeros(1, 2)}
    total, parts = loss(out, torch.ones(1, 2), torch.tensor([0]))
    assert parts["sparsity"] == pytest.approx(0.1 * 2.0)
    assert parts["recon"] == pytest.approx(0.5) and parts["ce"] == pytest.approx(2 * np.log(2))
    assert float(total) == pytest.approx(sum(parts.values()))
    with pytest.raises(TypeError, match="disagree"):
        CDMLLoss(recon_weight=1.0, beta=0.5)
