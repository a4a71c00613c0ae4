"""F.pad: pad (or, with negative amounts, crop) the last dims of a tensor, in PyTorch's four modes.

    pad = (left, right)                          the last dim
    pad = (left, right, top, bottom)             the last two, the last dim first
    pad = (left, right, top, bottom, front, back)  and so on

    x = a b c d,  pad (2, 2):
        constant   0 0 a b c d 0 0        a fill value (0 by default)
        reflect    c b a b c d c b        mirrored at the edge, the edge itself not repeated
        replicate  a a a b c d d d        the edge repeated
        circular   c d a b c d a b        wrapped around

Every mode is differentiable through the ops it is made of: constant padding is a slice (the crop) and a
concatenation with blocks of the fill; the others index the dim with each output position's source, and
indexing adds up the gradients of positions read more than once.

PyTorch's rules, followed here: constant padding takes any number of dims (up to all of them) and crops
first, one negative amount at a time (a crop past the dim's size is an error); the other modes pad the last
1, 2 or 3 dims of an input with one or two more (a batch and a channel dim, or just channels), and
NotImplementedError says so for other combinations. reflect and replicate need every dim but the batch to
be non-empty and have no bool version; reflect needs each amount smaller than its dim. circular crops the
negative amounts first and then wraps around what is left, which it may do only once.
"""
from __future__ import annotations

from .. import dtypes
from ..creation import full
from ..ops.movement import cat
from ..tensor import Tensor

MODES = ("constant", "reflect", "replicate", "circular")


def pad(input: Tensor, pad, mode: str = "constant", value: float = None) -> Tensor:
    """Pad the last len(pad) // 2 dims: pad = (before, after) for the last dim, then for the one before it,
    and so on (PyTorch's order). Negative amounts crop. mode: "constant" (fill with `value`, default 0),
    "reflect", "replicate" or "circular" (the module docstring draws them)."""
    if mode not in MODES:
        raise NotImplementedError(f"pad: unrecognised padding mode {mode!r}; choose one of {', '.join(MODES)}")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2:
        raise RuntimeError(f"pad: needs two amounts (before, after) per padded dim, got {len(pad)}: {pad}")
    if len(pad) > 2 * input.ndim:
        raise RuntimeError(f"pad: {len(pad)} amounts pad {len(pad) // 2} dims, but the input of shape {input.shape} "
                           f"has only {input.ndim}")
    # (dim, before, after) for each padded dim, the last dim first
    amounts = [(input.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]
    if mode == "constant":
        return _pad_constant(input, amounts, 0 if value is None else value)
    if value is not None and value != 0:
        raise RuntimeError(f"pad: mode {mode!r} takes no value (only mode='constant' fills with one)")
    padded = len(amounts)
    if padded not in (1, 2, 3) or input.ndim not in (padded + 1, padded + 2):
        raise NotImplementedError(
            f"pad: {len(pad)} amounts ({padded} dims) with mode {mode!r} are not supported for a {input.ndim}-d "
            f"input: {mode} padding pads the last 1, 2 or 3 dims of an input with one or two more (2 amounts for "
            "2-d or 3-d input, 4 for 3-d or 4-d, 6 for 4-d or 5-d)")
    if mode == "circular":
        return _pad_circular(input, amounts)
    return _pad_reflect_or_replicate(input, amounts, mode)


def _pad_constant(x: Tensor, amounts, value) -> Tensor:
    """Crop the negative amounts (PyTorch's narrow: each crop must leave a size >= 0), then put blocks full of
    `value` (converted to x's dtype) on the positive sides."""
    for dim, before, after in amounts:
        n = x.shape[dim]
        if n + min(before, 0) < 0 or n + min(before, 0) + min(after, 0) < 0:
            raise RuntimeError(f"pad: padding ({before}, {after}) crops dim {dim} of size {n} below nothing")
    out = x
    for dim, before, after in amounts:
        n, keep = out.shape[dim], (slice(None),) * dim
        out = out[keep + (slice(max(-before, 0), n - max(-after, 0)),)]

        def block(size):
            return full(out.shape[:dim] + (size,) + out.shape[dim + 1:], value, dtype=out.dtype, device=out.device)
        pieces = ([block(before)] if before > 0 else []) + [out] + ([block(after)] if after > 0 else [])
        out = cat(pieces, dim) if len(pieces) > 1 else out
    return out


def _pad_reflect_or_replicate(x: Tensor, amounts, mode: str) -> Tensor:
    """Index each padded dim with the source of every output position -before .. n + after - 1, folded back
    into 0 .. n - 1: mirrored about the end elements (reflect) or clamped to them (replicate)."""
    batch_dims = x.ndim - len(amounts) - 1          # 1 for (N, C, ...), 0 for (C, ...)
    if 0 in x.shape[batch_dims:]:
        raise RuntimeError(f"pad: {mode} padding needs every dim but the batch to be non-empty, got shape "
                           f"{x.shape}")
    outs = []
    for dim, before, after in amounts:
        n = x.shape[dim]
        if mode == "reflect" and max(before, after) >= n:
            raise RuntimeError(f"pad: reflect padding ({before}, {after}) must be less than the size {n} of dim {dim}")
        outs.append(n + before + after)
    # PyTorch's checks of the output's size: one padded dim at least 1 (a 1-d padding: that one), none negative
    if min(outs) < 0 or max(outs) < 1:
        raise RuntimeError(f"pad: {mode} padding {tuple(a for _, b, c in amounts for a in (b, c))} of an input of "
                           f"shape {x.shape} gives padded sizes {tuple(reversed(outs))}; too small")
    if x.dtype == dtypes.bool_:
        raise NotImplementedError(f"pad: {mode} padding is not implemented for bool tensors (as in PyTorch); "
                                  "convert first, e.g. x.long(), or use mode='circular' or 'constant'")
    out = x
    for dim, before, after in amounts:
        n = x.shape[dim]
        fold = (lambda i: -i if i < 0 else 2 * (n - 1) - i if i >= n else i) if mode == "reflect" else \
            (lambda i: min(max(i, 0), n - 1))
        out = out[(slice(None),) * dim + ([fold(i) for i in range(-before, n + after)],)]
    return out


def _pad_circular(x: Tensor, amounts) -> Tensor:
    """Crop the negative amounts, then wrap around what is left: the left padding repeats its last elements,
    the right padding its first ones. Wrapping more than once is refused (PyTorch checks each amount against
    the dim's size, and its copies fail, or read memory never written, when an amount exceeds what the crop
    left)."""
    for dim, before, after in amounts:
        n = x.shape[dim]
        if before > n or after > n:
            raise RuntimeError(f"pad: circular padding ({before}, {after}) of dim {dim} (size {n}) would wrap "
                               "around more than once")
        if n + before + after < 0:
            raise RuntimeError(f"pad: circular padding ({before}, {after}) crops dim {dim} of size {n} below nothing")
        left = n + min(before, 0) + min(after, 0)          # what the crops leave
        if max(before, after) > left:
            raise RuntimeError(f"pad: circular padding ({before}, {after}) of dim {dim} (size {n}) wraps around what "
                               f"its crop leaves ({left}) more than once")
    out = x
    for dim, before, after in amounts:
        n = out.shape[dim]
        start = max(-before, 0)
        left = n + min(before, 0) + min(after, 0)
        if before or after:
            # output position p reads the kept part [start, start + left) at (p - before) mod left
            sources = [start + (p - max(before, 0)) % left for p in range(left + max(before, 0) + max(after, 0))] \
                if left else []
            out = out[(slice(None),) * dim + (sources,)] if sources else out[(slice(None),) * dim + (slice(0, 0),)]
    return out
