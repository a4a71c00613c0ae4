"""Differentiable ops: autograd Functions (tensor.Function), one file per family, each op's forward beside its backward.

    elementwise.py    arithmetic, unary math, GELU, clamp, maximum/minimum, where, comparisons
    exponential.py    exp2, log2, log10, expm1, log1p, logaddexp
    trigonometric.py  tan, asin, acos, atan, sinh, cosh and their inverses
    rounding.py       floor, ceil, trunc, round, and the divisions that round (fmod, remainder)
    blend.py          copysign, lerp, isclose: one value weighed against another
    bitwise.py        ~ & | ^ and shifts on integer and bool tensors
    activations.py    softplus (nn/activations.py holds the rest)
    reduce.py         sum, prod, mean, var, max, min, argmax, any, all, logsumexp, softmax, log_softmax
    scan.py           cumsum, cumprod, cummax, cummin, logcumsumexp
    sort.py           sort, argsort, topk
    movement.py       reshape, permute, expand, indexing, cat, triangle masks, to(device): no arithmetic
    rearrange.py      flip, roll, repeat, unflatten, unfold, diag, diagonal
    gather.py         gather and scatter by an index tensor
    linalg.py         matmul, linear, dot, einsum
    conv.py           im2col and col2im, on which convolution is built
    pooling.py        pooling through conv.py's patches
    losses.py         binary cross-entropy's own Function
    fused.py          the fused ops: forward and backward each run one of our kernels (tinygrad_gpu/kernels),
                      beside the op's composition (the same op as Tensor ops)
    compositions.py   PyTorch functions written as our ops, with no Function of their own
    custom_function.py  PyTorch's form of a Function (staticmethod forward(ctx, ...), backward(ctx, ...)), for your ops
"""
