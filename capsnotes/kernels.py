"""Fast kernels: tested variants that compute exactly what the reference code computes.

The chapters teach ``nn.Conv2d`` and :func:`capsnotes.dynamic_routing`. A model can be
built with the variants here instead (``CapsNet(config, routing=fused_dynamic_routing,
convolution=MatmulConv2d)``); which is faster on a machine is decided by
:mod:`capsnotes.tuning`, which also maps the names the configurations use to them. Both
are tested against the reference (``tests/test_kernels.py``):

* :class:`MatmulConv2d` — on a CPU, a training step of CapsNet is dominated by the 9×9
  stride-2 primary-capsule convolution, and on some CPUs oneDNN's backward kernels for it
  run far below the machine's matrix-multiply rate. Lowering the convolution to
  ``im2col`` plus one matrix product per pass (forward, weight gradient, input gradient)
  runs all three at that rate.
* :func:`fused_dynamic_routing` — routing by agreement with a hand-written backward.
  Autograd through Procedure 1 writes one ``[batch, child, parent, dim]`` gradient per
  iteration and adds them up; the backward here collects every contribution to the
  gradient of the votes as a rank-``(2r - 1)`` product and writes that tensor once.

Measured effects are in the Performance chapter and ``benchmarks/``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .checks import check_iterations
from .routing import dynamic_routing
from .squash import squash

__all__ = ["MatmulConv2d", "conv2d_as_matmul", "fused_dynamic_routing", "patches"]


def patches(x: Tensor, kernel_size: int, stride: int) -> Tensor:
    """``im2col`` for a channels-last image: ``x`` ``[B, H, W, C]`` (contiguous) →
    ``[B * H' * W', kernel_size² * C]``, one row per output position, ordered
    ``(row, column, channel)`` within the window.

    For a fixed output row and kernel row, the window's ``kernel_size × C`` values at
    every output column are contiguous in ``x``; copying those strips one (output row,
    kernel row) pair at a time is several times faster than one big strided copy.
    """
    batch, height, width, channels = x.shape
    out_h = (height - kernel_size) // stride + 1
    out_w = (width - kernel_size) // stride + 1
    s_batch, s_row, s_col, s_chan = x.stride()
    if (channels > 1 and s_chan != 1) or s_col != channels:
        raise ValueError("patches() needs a contiguous [B, H, W, C] tensor")
    out = x.new_empty(batch, out_h, out_w, kernel_size, kernel_size * channels)
    for row in range(out_h):
        for k_row in range(kernel_size):
            strip = x.as_strided(
                (batch, out_w, kernel_size * channels),
                (s_batch, stride * s_col, 1),
                x.storage_offset() + (stride * row + k_row) * s_row,
            )
            out[:, row, :, k_row] = strip
    return out.view(batch * out_h * out_w, kernel_size * kernel_size * channels)


def _compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype the matrix products run in: autocast's on the CPU when it is on (so that a
    convolution computed as matrix products uses bf16 exactly where ``nn.Conv2d`` would),
    else the input's own."""
    if torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu")
    return x.dtype


class _ConvAsMatmul(torch.autograd.Function):
    """Unpadded, undilated 2-D convolution as im2col + matrix products. Under CPU
    autocast the products run in the autocast dtype, as the native convolution's do; the
    input gradient is summed in at least float32."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, stride: int) -> Tensor:  # noqa: ANN001
        batch, _, height, width = x.shape
        out_channels, in_channels, kernel_size, _ = weight.shape
        out_h = (height - kernel_size) // stride + 1
        out_w = (width - kernel_size) // stride + 1
        dtype = _compute_dtype(x)
        cols = patches(x.to(dtype).permute(0, 2, 3, 1).contiguous(), kernel_size, stride)
        # weight as [out, (row, column, channel)], matching the order of the columns
        matrix = weight.to(dtype).permute(0, 2, 3, 1).reshape(out_channels, -1)
        out = cols @ matrix.t()
        if bias is not None:
            out += bias.to(dtype)
        ctx.save_for_backward(cols, matrix)
        ctx.geometry = (batch, in_channels, height, width, kernel_size, stride, out_h, out_w)
        ctx.has_bias = bias is not None
        ctx.dtypes = (x.dtype, weight.dtype)
        # [B*H'*W', out] is channels-last memory; return it as a logical NCHW view.
        return out.view(batch, out_h, out_w, out_channels).permute(0, 3, 1, 2)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad: Tensor):  # noqa: ANN001, ANN205
        cols, matrix = ctx.saved_tensors
        batch, in_channels, height, width, k, stride, out_h, out_w = ctx.geometry
        x_dtype, weight_dtype = ctx.dtypes
        out_channels = matrix.shape[0]
        grad_rows = grad.permute(0, 2, 3, 1).reshape(-1, out_channels).to(cols.dtype)
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad_rows.t() @ cols).view(out_channels, k, k, in_channels)
            grad_weight = grad_weight.permute(0, 3, 1, 2).to(weight_dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_rows.sum(dim=0, dtype=weight_dtype)
        if ctx.needs_input_grad[0]:
            # col2im: every window position adds its gradient back onto the pixel it read.
            # One kernel row at a time, so the [B*H'*W', k*C] block stays in cache; the
            # sums are kept in at least float32 (up to k² terms meet at a pixel).
            total = torch.promote_types(x_dtype, torch.float32)
            grad_nhwc = grad_rows.new_zeros(batch, height, width, in_channels, dtype=total)
            span_h, span_w = stride * (out_h - 1) + 1, stride * (out_w - 1) + 1
            row_block = k * in_channels
            for k_row in range(k):
                block = grad_rows @ matrix[:, k_row * row_block : (k_row + 1) * row_block]
                block = block.view(batch, out_h, out_w, k, in_channels)
                for k_col in range(k):
                    grad_nhwc[
                        :, k_row : k_row + span_h : stride, k_col : k_col + span_w : stride
                    ] += block[:, :, :, k_col]
            grad_x = grad_nhwc.permute(0, 3, 1, 2).to(x_dtype)
        return grad_x, grad_weight, grad_bias, None


def conv2d_as_matmul(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int = 1
) -> Tensor:
    """``F.conv2d(x, weight, bias, stride)`` (no padding, dilation or groups), computed
    as im2col and matrix products in forward and backward.

    ``x`` ``[B, C, H, W]``, ``weight`` ``[O, C, k, k]`` → ``[B, O, H', W']`` (a
    channels-last tensor).
    """
    if weight.shape[2] != weight.shape[3]:
        raise ValueError(f"square kernels only, got {tuple(weight.shape[2:])}")
    return _ConvAsMatmul.apply(x, weight, bias, stride)


def _matmul_conv_supports(conv: nn.Conv2d) -> bool:
    return (
        conv.padding in ((0, 0), "valid")
        and conv.dilation == (1, 1)
        and conv.groups == 1
        and conv.stride[0] == conv.stride[1]
        and conv.kernel_size[0] == conv.kernel_size[1]
        and conv.padding_mode == "zeros"
    )


class MatmulConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` (the same parameters, the same ``state_dict``) that trains through
    :func:`conv2d_as_matmul`. Without gradients it uses the native convolution, which is
    as fast forward and needs no im2col buffer."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self._check_supported()

    def _check_supported(self) -> None:
        if not _matmul_conv_supports(self):
            raise ValueError(
                "MatmulConv2d supports square, unpadded, undilated, ungrouped convolutions"
            )

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            return conv2d_as_matmul(x, self.weight, self.bias, self.stride[0])
        return F.conv2d(x, self.weight, self.bias, self.stride)


class _FusedRouting(torch.autograd.Function):
    """Procedure 1 with a backward derived by hand (see :func:`fused_dynamic_routing`)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, u_hat: Tensor, iterations: int) -> Tensor:  # noqa: ANN001
        votes = u_hat.transpose(1, 2).contiguous()  # V: [B, O, I, D]
        batch, parents, children, _ = votes.shape
        logits = votes.new_zeros(batch, parents, children)  # b, laid out [B, O, I]
        saved: list[Tensor] = []
        for iteration in range(iterations):
            coupling = logits.softmax(dim=1)  # over the parents
            s = (coupling.unsqueeze(2) @ votes).squeeze(2)  # [B, O, D]
            v = squash(s)
            saved += [coupling, s, v]
            if iteration + 1 < iterations:
                logits = logits + (v.unsqueeze(2) @ votes.transpose(2, 3)).squeeze(2)
        ctx.iterations = iterations
        ctx.save_for_backward(votes, *saved)
        return v

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_v: Tensor):  # noqa: ANN001, ANN205
        votes, *saved = ctx.saved_tensors
        r = ctx.iterations
        grad_logits = None  # dL/db of the logits after iteration t
        weights: list[Tensor] = []  # dL/dV = Σ_k weights[k] ⊗ vectors[k]
        vectors: list[Tensor] = []
        for t in reversed(range(r)):
            coupling, s, v = saved[3 * t : 3 * t + 3]
            if t == r - 1:
                grad_out = grad_v
            else:
                # b_{t+1} = b_t + V·v_t: v_t receives Σ_i gb_i V_i, V receives gb ⊗ v_t
                grad_out = (grad_logits.unsqueeze(2) @ votes).squeeze(2)
                weights.append(grad_logits)
                vectors.append(v)
            with torch.enable_grad():
                s_leaf = s.detach().requires_grad_()
                (grad_s,) = torch.autograd.grad(squash(s_leaf), s_leaf, grad_out)
            # s_t = Σ_i c_i V_i: c receives V·gs, V receives c ⊗ gs
            grad_coupling = (grad_s.unsqueeze(2) @ votes.transpose(2, 3)).squeeze(2)  # [B, O, I]
            weights.append(coupling)
            vectors.append(grad_s)
            # softmax over the parents (dim 1), backwards
            grad_b = coupling * (grad_coupling - (coupling * grad_coupling).sum(1, keepdim=True))
            grad_logits = grad_b if grad_logits is None else grad_logits + grad_b
        # One product writes the whole gradient of the votes: [B,O,I,K] @ [B,O,K,D]
        grad_votes = torch.stack(weights, dim=-1) @ torch.stack(vectors, dim=-2)
        return grad_votes.transpose(1, 2), None


def fused_dynamic_routing(
    u_hat: Tensor, iterations: int = 3, return_coupling: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`capsnotes.dynamic_routing` with a hand-written backward: the same values
    and the same gradients (tested in float64), fewer passes over the votes.

    With ``return_coupling`` it defers to the reference implementation.
    """
    if return_coupling or u_hat.dim() != 4 or not u_hat.is_floating_point():
        return dynamic_routing(u_hat, iterations, return_coupling)
    return _FusedRouting.apply(u_hat, check_iterations(iterations))
