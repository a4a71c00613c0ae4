"""Tools for tests and benchmarks. Nothing here is a device or is imported by the library itself.

``cupy_standin``: a strict stand-in for CuPy on a machine without a GPU, switched on with
``TINYGRAD_GPU_CUPY=standin`` (see its docstring for what it proves and where it stops).
"""
