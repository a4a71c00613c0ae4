"""benchmarks/cpu_kernels.py runs: every candidate's row for GELU and layer norm, timed and checked against the
reference where its library is installed, "not installed" where it is not."""
import importlib.util
import re
from pathlib import Path

spec = importlib.util.spec_from_file_location("benchmark_cpu_kernels",
                                              Path(__file__).parent.parent / "benchmarks" / "cpu_kernels.py")
benchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchmark)


def test_every_candidate_has_a_row_for_each_op(capsys):
    assert benchmark.main(["--small", "--repeat", "1"]) == 0
    table = capsys.readouterr().out
    for op in ("gelu", "layer norm"):
        rows = [line for line in table.splitlines() if line.startswith(f"small {op} ")]
        assert [re.split(r"\s{2,}", row)[1] for row in rows][:2] == ["numpy", "numba"]
        assert re.search(r"numpy\s+[0-9.]+\s+1\.00x", rows[0])
        for row in rows[1:]:
            timed = re.search(r"\s([0-9.]+)x\s+[0-9.]+\s+([0-9.e+-]+)$", row)
            assert timed or row.endswith("not installed")
            if timed:
                assert float(timed.group(2)) < 1e-5          # each candidate computes the reference's numbers
    assert re.search(r"^numba( [0-9.]+: \d+ threads; vectorized tanh and exp \(SVML\): (yes|no)|: not installed)$",
                     table, re.M)
    assert re.search(r"^numexpr( [0-9.]+: \d+ threads|: not installed)$", table, re.M)
