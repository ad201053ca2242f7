"""A straightforward CapsNet, written the way it is commonly written.

This is the yardstick for ``benchmarks/compare.py``: the same architecture, the same
semantics (softmax over parents, per-example logits, squared margin loss, summed
reconstruction error) and the same initialisation as ``capsnotes.CapsNet``, but with
none of its speed work: einsum routing on ``[B, in, out, dim]`` tensors, float32, eager
mode, contiguous (NCHW) convolutions, and a torchvision ``DataLoader`` feeding it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def baseline_squash(s: Tensor, eps: float = 1e-8) -> Tensor:
    norm_sq = (s**2).sum(dim=-1, keepdim=True)
    return norm_sq / (1 + norm_sq) * s / torch.sqrt(norm_sq + eps)


class BaselineCapsNet(nn.Module):
    """The paper's MNIST CapsNet in the plainest PyTorch (8,215,568 parameters)."""

    def __init__(self, iterations: int = 3) -> None:
        super().__init__()
        self.iterations = iterations
        self.conv1 = nn.Conv2d(1, 256, kernel_size=9)
        self.primary = nn.Conv2d(256, 32 * 8, kernel_size=9, stride=2)
        self.W = nn.Parameter(0.01 * torch.randn(1152, 10, 16, 8))
        self.decoder = nn.Sequential(
            nn.Linear(160, 512),
            nn.ReLU(),
            nn.Linear(512, 1024),
            nn.ReLU(),
            nn.Linear(1024, 784),
            nn.Sigmoid(),
        )

    def forward(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        batch = x.shape[0]
        h = F.relu(self.conv1(x))
        p = self.primary(h).view(batch, 32, 8, 6, 6).permute(0, 1, 3, 4, 2)
        u = baseline_squash(p.reshape(batch, 1152, 8))
        u_hat = torch.einsum("ijkl,bil->bijk", self.W, u)  # [B, 1152, 10, 16]
        b = torch.zeros(batch, 1152, 10, device=x.device, dtype=x.dtype)
        for r in range(self.iterations):
            c = F.softmax(b, dim=2)
            s = torch.einsum("bij,bijk->bjk", c, u_hat)
            v = baseline_squash(s)
            if r < self.iterations - 1:
                b = b + torch.einsum("bijk,bjk->bij", u_hat, v)
        mask = F.one_hot(y, 10).float().unsqueeze(-1)
        recon = self.decoder((v * mask).view(batch, -1)).view_as(x)
        return v, recon


def baseline_loss(v: Tensor, recon: Tensor, x: Tensor, y: Tensor) -> Tensor:
    lengths = v.norm(dim=-1)
    t = F.one_hot(y, 10).float()
    margin = t * F.relu(0.9 - lengths) ** 2 + 0.5 * (1 - t) * F.relu(lengths - 0.1) ** 2
    recon_err = ((recon - x) ** 2).view(x.shape[0], -1).sum(dim=1)
    return margin.sum(dim=1).mean() + 0.0005 * recon_err.mean()
