"""The tour (docs/how_it_works.md) runs: its python blocks, in order, in one namespace, so it cannot
go stale. Each block's assertions are the tour's claims about what the code does."""
import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "how_it_works.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), flags=re.M | re.S)


def test_the_tour_has_its_blocks():
    assert len(BLOCKS) >= 8


def test_the_tour_runs_as_written():
    namespace = {}
    for number, block in enumerate(BLOCKS, 1):
        try:
            exec(compile(block, f"{DOC.name}, block {number}", "exec"), namespace)
        except Exception as e:       # name the block: the tour is read by people, not by pytest
            pytest.fail(f"{DOC.name}, python block {number} failed: {type(e).__name__}: {e}\n{block}")
