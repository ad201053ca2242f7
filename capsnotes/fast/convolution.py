"""The convolutions as matrix products: :class:`MatmulConv2d`, an ``nn.Conv2d`` with the
same parameters and results that trains through ``im2col``: one matrix product forward
and one for the weight gradient; the input gradient as products and col2im, or by the
library's own kernel.

On a CPU, a training step of CapsNet is dominated by the 9×9 stride-2 primary-capsule
convolution. Its native weight-gradient kernel runs at about half the matrix-multiply
rate on some CPUs: on a 2-core AMD Zen 5 in bf16 at batch 64 it took 55 ms, and the
same gradient as one product 28 ms (one-off timings with ``torch.utils.benchmark``).
The trainer times a forward and backward pass with each candidate
(:mod:`capsnotes.fast.cpu`). Hand-written: torch has no im2col convolution whose
backward is matrix products.

The input gradient has two forms. As products (``input_gradient="matmul"``), the
output's gradient times the weight matrix gives one row per window, and col2im adds
each row back onto the pixels its window read: 81 strided additions in float32 for the
primary convolution, passes over memory rather than arithmetic. On a 2-core AMD Zen 5,
in bf16, that input gradient took 43 ms at batch 64, 17 of them in col2im's additions,
and 92 ms at batch 128, 41 in the additions (one-off timings inside the training
step). ``input_gradient="native"`` takes it from the native convolution's own backward
kernel instead (``torch.nn.grad.conv2d_input``, oneDNN on a CPU), in one kernel call.
Which is faster may depend on the CPU, so the trainer times both
(:data:`capsnotes.fast.CONVOLUTIONS`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def patches(x: Tensor, kernel_size: int, stride: int) -> Tensor:
    """``im2col`` for a channels-last image: ``x`` ``[B, H, W, C]`` (contiguous) →
    ``[B * H' * W', kernel_size² * C]``, one row per output position, ordered
    ``(row, column, channel)`` within the window.

    For a fixed output position and kernel row, the window's ``kernel_size × C`` values
    are contiguous in ``x``, so the windows are one strided view of ``x`` whose last
    axis is contiguous, copied once (a loop over output and kernel rows, one strip copy
    each, took 2.9 ms against 1.7 for the primary convolution at batch 64 in bf16, and
    1.0 against 0.4 ms for conv1: 2-core AMD Zen 5).
    """
    batch, height, width, channels = x.shape
    out_h = (height - kernel_size) // stride + 1
    out_w = (width - kernel_size) // stride + 1
    s_batch, s_row, s_col, s_chan = x.stride()
    if (channels > 1 and s_chan != 1) or s_col != channels:
        raise ValueError("patches() needs a contiguous [B, H, W, C] tensor")
    windows = x.as_strided(
        (batch, out_h, out_w, kernel_size, kernel_size * channels),
        (s_batch, stride * s_row, stride * s_col, s_row, 1),
        x.storage_offset(),
    )
    return windows.reshape(batch * out_h * out_w, kernel_size * kernel_size * channels)


class _ConvAsMatmul(torch.autograd.Function):
    """:func:`conv2d_as_matmul`'s autograd function. Under CPU autocast its products run
    in the autocast dtype, as the native convolution's do."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(
        ctx, x: Tensor, weight: Tensor, bias: Tensor | None, stride: int, native: bool
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
        ctx.native_input_gradient = native
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
            # dL/dW = grad_rowsᵀ cols, a sum over the B·H'·W' rows. A product over a
            # transposed view's long axis runs slower than over a contiguous one
            # (primary convolution: 70 vs 57 ms). So the gradient, the narrower factor
            # there (256 channels against 20,736 columns), is transposed in memory
            # first. Where the columns are narrower (conv1: 81 against 256 channels),
            # copying the gradient costs more than it saves, and (colsᵀ grad)ᵀ on
            # views is the fastest (4.1 ms, against 4.9 as gradᵀ cols on a view and
            # 15 with the copy). All at batch 128 in bf16 on a 2-core AMD Zen 5,
            # one-off timings with torch.utils.benchmark.
            if out_channels <= cols.shape[1]:
                grad_matrix = grad_rows.t().contiguous() @ cols
            else:
                grad_matrix = (cols.t() @ grad_rows).t()
            grad_weight = grad_matrix.view(out_channels, k, k, in_channels)
            # in the parameter's layout (accumulating a permuted view costs more): the
            # conversion writes it contiguous; in the weight's own dtype, where .to()
            # returns the view, .contiguous() copies
            grad_weight = grad_weight.permute(0, 3, 1, 2)
            contiguous = torch.contiguous_format
            grad_weight = grad_weight.to(weight_dtype, memory_format=contiguous)
            grad_weight = grad_weight.contiguous()
        if ctx.needs_input_grad[2]:  # False without a bias
            # the column sums as a product (a sum over dim 0 of [B·H'·W', C] is a slow
            # reduction), rounded to the columns' dtype as the native kernel's are
            ones = grad_rows.new_ones(1, grad_rows.shape[0])
            grad_bias = (ones @ grad_rows).view(out_channels).to(weight_dtype)
        if ctx.needs_input_grad[0] and ctx.native_input_gradient:
            # the library's kernel, with the weight and gradient channels-last as the
            # columns are (no copy: both are views of the blocks above)
            weight_nhwc = matrix.view(out_channels, k, k, in_channels)
            grad_x = torch.nn.grad.conv2d_input(
                (batch, in_channels, height, width),
                weight_nhwc.permute(0, 3, 1, 2),
                grad_rows.view(batch, out_h, out_w, out_channels).permute(0, 3, 1, 2),
                stride,
            ).to(x_dtype)
        elif ctx.needs_input_grad[0]:
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
        return grad_x, grad_weight, grad_bias, None, None


#: How :func:`conv2d_as_matmul` computes the input gradient: products and col2im, or
#: the library's own kernel.
INPUT_GRADIENTS = ("matmul", "native")


def check_input_gradient(input_gradient: str) -> str:
    """``input_gradient``, if it is one of :data:`INPUT_GRADIENTS`."""
    if input_gradient not in INPUT_GRADIENTS:
        raise ValueError(
            f"input_gradient must be one of {INPUT_GRADIENTS}, got {input_gradient!r}"
        )
    return input_gradient


def conv2d_as_matmul(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int = 1,
    input_gradient: str = "matmul",
) -> Tensor:
    """``F.conv2d(x, weight, bias, stride)`` (no padding, dilation or groups; a square
    kernel) as im2col and matrix products in forward and for the weight's gradient:
    ``x`` ``[B, C, H, W]``, ``weight`` ``[O, C, k, k]`` → ``[B, O, H', W']`` (a
    channels-last tensor). The input's gradient: products and col2im (``"matmul"``) or
    ``torch.nn.grad.conv2d_input`` (``"native"``)."""
    native = check_input_gradient(input_gradient) == "native"
    return _ConvAsMatmul.apply(x, weight, bias, stride, native)


class MatmulConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` (the same parameters, the same ``state_dict``) that trains
    through :func:`conv2d_as_matmul`, its input gradient as ``input_gradient`` says.
    Without gradients it uses the native convolution, which is as fast forward and
    needs no im2col buffer."""

    def __init__(  # noqa: ANN002, ANN003
        self, *args, input_gradient: str = "matmul", **kwargs
    ) -> None:
        super().__init__(*args, **kwargs)
        self.input_gradient = check_input_gradient(input_gradient)
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
    def like(cls, conv: nn.Conv2d, input_gradient: str = "matmul") -> MatmulConv2d:
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
            input_gradient=input_gradient,
        )
        fast.weight, fast.bias = conv.weight, conv.bias
        return fast

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            return conv2d_as_matmul(
                x, self.weight, self.bias, self.stride[0], self.input_gradient
            )
        return F.conv2d(x, self.weight, self.bias, self.stride)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, input_gradient={self.input_gradient!r}"
