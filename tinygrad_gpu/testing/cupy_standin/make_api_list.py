"""Write cupy_api.json: the names CuPy has, read from the installed ``cupy`` by introspection.

    python -m tinygrad_gpu.testing.cupy_standin.make_api_list

CuPy imports without a GPU, so this runs anywhere cupy-cuda12x is installed. The stand-in
offers a NumPy function, an ndarray method or a generator method only when its name is in
this list, so code that works on the stand-in does not call what CuPy lacks. Ufuncs keep
their type signatures ('e->d': float16 in, float64 out), which is how the stand-in gives
CuPy's result dtypes where they differ from NumPy's.
"""
import json
from pathlib import Path


def _public(obj, extra=()):
    return sorted(n for n in dir(obj) if not n.startswith("_") or n in extra)


def _ufunc_types(module):
    import cupy
    return {n: list(getattr(module, n).types) for n in _public(module) if isinstance(getattr(module, n), cupy.ufunc)}


def api() -> dict:
    import cupy
    import cupyx
    import cupyx.scipy.special
    return {
        "cupy_version": cupy.__version__,
        "module": _public(cupy),
        "linalg": _public(cupy.linalg),
        "ufunc_types": _ufunc_types(cupy),
        "ufunc_methods": _public(cupy.add),
        "ndarray": _public(cupy.ndarray, extra=("__dlpack__", "__cuda_array_interface__")),
        "random": _public(cupy.random),
        "generator": _public(cupy.random.Generator),
        "cupyx": _public(cupyx),
        "cupyx_scipy_special_ufunc_types": _ufunc_types(cupyx.scipy.special),
    }


if __name__ == "__main__":
    path = Path(__file__).with_name("cupy_api.json")
    path.write_text(json.dumps(api(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {path}")
