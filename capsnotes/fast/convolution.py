"""The convolutions as matrix products: :class:`MatmulConv2d`, an ``nn.Conv2d`` with the
same parameters and results that trains through ``im2col`` and one matrix product per
pass (forward, weight gradient, input gradient).

On a CPU, a training step of CapsNet is dominated by the 9×9 stride-2 primary-capsule
convolution, whose backward kernels run far below the matrix-multiply rate on some
CPUs (timed: :mod:`capsnotes.fast.cpu`). Hand-written: torch has no im2col convolution
whose backward is matrix products.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


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


class _ConvAsMatmul(torch.autograd.Function):
    """:func:`conv2d_as_matmul`'s autograd function. Under CPU autocast its products run
    in the autocast dtype, as the native convolution's do."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(
        ctx, x: Tensor, weight: Tensor, bias: Tensor | None, stride: int
    ) -> Tensor:  # noqa: ANN001
        batch, _, height, width = x.shape
        out_channels, in_channels, kernel_size, _ = weight.shape
        out_h = (height - kernel_size) // stride + 1
        out_w = (width - kernel_size) // stride + 1
        autocast = torch.is_autocast_enabled("cpu")
        dtype = torch.get_autocast_dtype("cpu") if autocast else x.dtype
        nhwc = x.to(dtype).permute(0, 2, 3, 1).contiguous()
        cols = patches(nhwc, kernel_size, stride)
        # weight as [out, (row, column, channel)], matching the order of the columns
        matrix = weight.to(dtype).permute(0, 2, 3, 1).reshape(out_channels, -1)
        out = cols @ matrix.t()
        if bias is not None:
            out += bias.to(dtype)
        ctx.save_for_backward(cols, matrix)
        ctx.geometry = (x.shape, kernel_size, stride, out_h, out_w)
        ctx.dtypes = (x.dtype, weight.dtype)
        # [B*H'*W', out] is channels-last memory; return it as a logical NCHW view.
        return out.view(batch, out_h, out_w, out_channels).permute(0, 3, 1, 2)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad: Tensor):  # noqa: ANN001, ANN205
        cols, matrix = ctx.saved_tensors
        (batch, in_channels, height, width), k, stride, out_h, out_w = ctx.geometry
        x_dtype, weight_dtype = ctx.dtypes
        out_channels = matrix.shape[0]
        grad_rows = grad.permute(0, 2, 3, 1).reshape(-1, out_channels).to(cols.dtype)
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad_rows.t() @ cols).view(out_channels, k, k, in_channels)
            grad_weight = grad_weight.permute(0, 3, 1, 2).to(weight_dtype)
        if ctx.needs_input_grad[2]:  # False without a bias
            grad_bias = grad_rows.sum(dim=0, dtype=weight_dtype)
        if ctx.needs_input_grad[0]:
            # col2im: every window position adds its gradient back onto the pixel it
            # read, one kernel row at a time (the [B*H'*W', k*C] block stays in cache),
            # summed in at least float32 (up to k² terms meet at a pixel).
            total = torch.promote_types(x_dtype, torch.float32)
            grad_nhwc = grad_rows.new_zeros(
                batch, height, width, in_channels, dtype=total
            )
            span_h, span_w = stride * (out_h - 1) + 1, stride * (out_w - 1) + 1
            for k_row, weights in enumerate(matrix.split(k * in_channels, dim=1)):
                block = (grad_rows @ weights).view(batch, out_h, out_w, k, in_channels)
                pixel_rows = slice(k_row, k_row + span_h, stride)
                for k_col in range(k):
                    pixel_cols = slice(k_col, k_col + span_w, stride)
                    grad_nhwc[:, pixel_rows, pixel_cols] += block[:, :, :, k_col]
            grad_x = grad_nhwc.permute(0, 3, 1, 2).to(x_dtype)
        return grad_x, grad_weight, grad_bias, None


def conv2d_as_matmul(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int = 1
) -> Tensor:
    """``F.conv2d(x, weight, bias, stride)`` (no padding, dilation or groups; a square
    kernel) as im2col and matrix products in forward and backward: ``x`` ``[B, C, H,
    W]``, ``weight`` ``[O, C, k, k]`` → ``[B, O, H', W']`` (a channels-last tensor)."""
    return _ConvAsMatmul.apply(x, weight, bias, stride)


class MatmulConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` (the same parameters, the same ``state_dict``) that trains
    through :func:`conv2d_as_matmul`. Without gradients it uses the native convolution,
    which is as fast forward and needs no im2col buffer."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        if not (
            self.padding in ((0, 0), "valid")
            and self.dilation == (1, 1)
            and self.groups == 1
            and self.stride[0] == self.stride[1]
            and self.kernel_size[0] == self.kernel_size[1]
            and self.padding_mode == "zeros"
        ):
            raise ValueError(
                "MatmulConv2d supports square, unpadded, undilated, ungrouped "
                "convolutions"
            )

    @classmethod
    def like(cls, conv: nn.Conv2d) -> MatmulConv2d:
        """A MatmulConv2d that shares ``conv``'s parameters."""
        fast = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            conv.stride,
            conv.padding,
            conv.dilation,
            conv.groups,
            conv.bias is not None,
            conv.padding_mode,
            device="meta",
        )
        fast.weight, fast.bias = conv.weight, conv.bias
        return fast

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            return conv2d_as_matmul(x, self.weight, self.bias, self.stride[0])
        return F.conv2d(x, self.weight, self.bias, self.stride)
