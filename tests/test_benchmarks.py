"""The benchmark compares like with like: the baseline computes capsnotes' function."""

import torch

from benchmarks.baseline import BaselineCapsNet, baseline_loss
from benchmarks.breakdown import breakdown
from benchmarks.compare import compare
from capsnotes import CapsNet, margin_loss, reconstruction_loss


def test_baseline_computes_the_same_model_and_loss():
    torch.manual_seed(0)
    ours = CapsNet().double()
    theirs = BaselineCapsNet().double()
    with torch.no_grad():
        theirs.conv1.load_state_dict(ours.conv1.state_dict())
        theirs.primary.load_state_dict(ours.primary.conv.state_dict())
        theirs.W.copy_(ours.digits.weight)
        theirs.decoder.load_state_dict(ours.decoder.layers.state_dict())
    images = torch.rand(3, 1, 28, 28, dtype=torch.float64)
    labels = torch.tensor([4, 0, 9])
    out = ours(images, labels)
    v, recon = theirs(images, labels)
    torch.testing.assert_close(v, out.capsules)
    torch.testing.assert_close(recon, out.reconstructions)
    torch.testing.assert_close(
        baseline_loss(v, recon, images, labels),
        margin_loss(out.capsules, labels) + reconstruction_loss(out.reconstructions, images),
    )
    assert sum(p.numel() for p in theirs.parameters()) == 8_215_568


def test_compare_and_breakdown_run_on_real_mnist(mnist_root):
    device = torch.device("cpu")
    rows = compare(
        device, batch_size=4, steps=1, rounds=1, warmup=1, root=mnist_root, ablation=True
    )
    assert set(rows) >= {"baseline", "capsnotes", "capsnotes, reference code only"}
    assert all(row["images_per_second"] > 0 for row in rows.values())
    parts = breakdown(device, batch_size=4, repeats=1, root=mnist_root)["parts_seconds"]
    assert set(parts) == {
        "data",
        "conv1",
        "primary capsules",
        "digit capsules (votes + routing)",
        "decoder + losses",
        "optimizer",
    }
    assert all(seconds >= 0 for seconds in parts.values())
