"""node_resources_fit's filter: the bit-mask path (few needed resources) gives the verdicts and the
reason objects of the row-by-row path it stands in for."""

import numpy as np
import pytest

from koordfw.builtin import node_resources_fit as nrf


@pytest.mark.parametrize("k", [1, 2, 3, 5, 62])
def test_verdicts_by_mask_equal_verdicts_by_row(k):
    rng = np.random.default_rng(k)
    names = [f"example.com/r{i}" for i in range(70)]
    names[3] = "pods"
    for _ in range(50):
        n = int(rng.integers(0, 40))
        need = np.sort(rng.choice(len(names), size=k, replace=False)).astype(np.int64)
        short = rng.random((n, k)) < rng.random()
        got, want = nrf._verdicts_by_mask(names, need, short), nrf._verdicts_by_row(names, need, short)
        if want is None:
            assert got is None
            continue
        assert got[0].dtype == want[0].dtype == np.bool_
        assert (got[0] == want[0]).all()
        # the same Status objects (the runtime shares one status among the nodes given one object)
        assert [id(r) for r in got[1]] == [id(r) for r in want[1]]
        assert all(r is None for r, fits in zip(got[1], got[0]) if fits)
