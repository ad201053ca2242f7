import torch

from capsnotes import Decoder, mask_capsules


def test_mask_keeps_only_the_chosen_capsule():
    capsules = torch.randn(3, 10, 16)
    classes = torch.tensor([0, 4, 9])
    masked = mask_capsules(capsules, classes).view(3, 10, 16)
    for b, k in enumerate(classes.tolist()):
        torch.testing.assert_close(masked[b, k], capsules[b, k])
        others = [j for j in range(10) if j != k]
        assert torch.equal(masked[b, others], torch.zeros(9, 16))


def test_decoder_sizes_and_range():
    decoder = Decoder()
    assert (
        sum(p.numel() for p in decoder.parameters())
        == (160 * 512 + 512 + 512 * 1024 + 1024 + 1024 * 784 + 784)
        == 1_411_344
    )
    out = decoder(torch.randn(5, 10, 16) * 10, torch.tensor([0, 1, 2, 3, 4]))
    assert out.shape == (5, 784)
    assert (out >= 0).all() and (out <= 1).all()


def test_decoder_sees_only_the_chosen_capsule():
    decoder = Decoder()
    capsules = torch.randn(2, 10, 16)
    classes = torch.tensor([3, 7])
    changed = capsules.clone()
    changed[:, [0, 1, 2, 4, 5, 6, 8, 9]] = torch.randn(2, 8, 16) * 100
    torch.testing.assert_close(decoder(capsules, classes), decoder(changed, classes))
    assert not torch.allclose(decoder(capsules, classes), decoder(capsules, torch.tensor([4, 7])))
