"""PyTorch's module functions that are Tensor methods too: tg.exp(x) is x.exp(), tg.add(x, y) is x.add(y).

Each function calls the method on its first argument, which must be a Tensor, as in PyTorch: tg.exp(2.0)
and tg.maximum(2, x) are TypeErrors (a method called on a number would fail deep inside instead). A few
arithmetic functions also take a Python number first, as PyTorch's do (tg.add(2, x), tg.pow(2, x),
tg.remainder(5, x)): the number becomes a 0-d tensor beside x by the scalar rule of dtypes.py, and the
method runs on that.
"""
from __future__ import annotations

import numbers

from .tensor import Tensor

METHODS_AS_FUNCTIONS = (
    "add", "sub", "mul", "div", "true_divide", "pow", "neg", "eq", "ne", "lt", "le", "gt", "ge",
    "exp", "log", "sqrt", "rsqrt", "reciprocal", "expm1", "log1p", "atan2", "arctan2", "tanh", "sigmoid", "relu",
    "abs", "sin", "cos", "erf", "sign", "square", "clamp", "clip", "clamp_min", "clamp_max", "maximum", "minimum",
    "masked_fill", "isfinite", "isnan", "logical_not", "logical_and", "logical_or", "sum", "mean", "var", "std",
    "max", "min", "amax", "amin", "argmax", "argmin", "logsumexp",
    "softmax", "log_softmax", "reshape", "flatten", "permute", "transpose", "movedim", "squeeze", "unsqueeze",
    "tril", "triu", "numel", "any", "all", "unbind", "narrow", "index_select", "outer",
    "gather", "scatter", "scatter_add", "scatter_reduce", "masked_select", "nonzero",
    "prod", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "sort", "argsort", "msort", "topk",
    "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "arcsin", "arccos", "arctan",
    "arcsinh", "arccosh", "arctanh", "exp2", "log2", "log10", "logaddexp", "floor", "ceil", "trunc", "fix", "round",
    "fmod", "remainder", "floor_divide", "copysign", "lerp", "isclose", "isinf", "isposinf", "isneginf",
    "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
    "logical_xor", "is_floating_point", "erfc", "logit", "signbit", "frac", "deg2rad", "rad2deg", "nan_to_num", "sinc",
    "fmax", "fmin", "hypot", "xlogy", "logaddexp2", "equal", "nansum", "nanmean", "aminmax", "count_nonzero",
    "median", "kthvalue", "norm", "trace", "t", "ravel", "broadcast_to", "tile", "fliplr", "flipud", "diag_embed",
    "tensor_split", "take", "take_along_dim", "argwhere", "index_add", "mm", "bmm", "mv", "addmm", "kron",
    "subtract", "multiply", "divide", "negative", "absolute", "positive", "swapaxes", "swapdims", "moveaxis", "sgn",
)
# the ones PyTorch also computes with a number as the first argument
NUMBER_FIRST = ("add", "sub", "mul", "div", "true_divide", "pow", "remainder", "floor_divide", "bitwise_and",
                "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift")


def function_form(name: str):
    """tg.<name>(input, *args, **options): input.<name>(*args, **options)."""
    method = getattr(Tensor, name)
    number_first = name in NUMBER_FIRST

    def function(input, *args, **options):
        if not isinstance(input, Tensor):
            if not (number_first and isinstance(input, numbers.Number) and args and isinstance(args[0], Tensor)):
                raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                                f"{type(input).__name__}")
            if name == "pow":                # number ** tensor: its own gradient at a zero base (Tensor.__rpow__)
                return args[0].__rpow__(input)
            input = args[0]._scalar_like(input)
        return method(input, *args, **options)
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"tg.{name}(input, ...) is input.{name}(...) (Tensor.{name})."
    return function


def function_forms() -> dict:
    """Every function of METHODS_AS_FUNCTIONS by name, for the package's namespace."""
    return {name: function_form(name) for name in METHODS_AS_FUNCTIONS}
