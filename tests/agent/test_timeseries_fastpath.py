"""The pure-Python ring buffer for series of few samples (SmallSeries, what the colocation replay's
5-minute slots use) gives exactly the figures of the numpy one (Series): numpy's pairwise sum, koordlet's
float32 percentile index, the same window, NaN handling and time span, bit for bit; and the store picks it
only for small capacities, so the agent's 1-second rounds stay on numpy."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from koordfw.agent.timeseries import (
    AGGREGATIONS,
    SMALL_CAPACITY,
    MetricStore,
    Series,
    SmallSeries,
    make_series,
    pairwise_sum,
    percentile,
    percentile_index,
)


def _value(rng: random.Random, nan_share: float) -> float | None:
    if rng.random() < nan_share:
        return None
    return rng.choice([rng.random() * 10 ** rng.randint(0, 12), float(rng.randint(0, 64000))])


def _pair(rng: random.Random, cap: int, nan_share: float) -> tuple[Series, SmallSeries]:
    """The same samples in both buffers: times mostly rising, sometimes repeated or stepping back."""
    big, small = Series(cap), SmallSeries(cap)
    t = 0.0
    for _ in range(rng.randint(0, 3 * cap + 3)):
        t += rng.choice([1.0, 1.0, 300.0, 0.0, -2.0, 0.5])
        cpu, mem = _value(rng, nan_share), _value(rng, nan_share)
        big.add(t, cpu, mem)
        small.add(t, cpu, mem)
    return big, small


@pytest.mark.parametrize("seed", range(4))
def test_small_series_gives_the_numpy_figures_bit_for_bit(seed):
    # capacities past SMALL_CAPACITY too (the fast path is exact at any size; the store only uses it
    # where it is faster), windows over part, all or none of the samples, with and without NaN
    rng = random.Random(seed)
    for _ in range(300):
        cap = rng.choice([1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 40, 130, 300])
        big, small = _pair(rng, cap, rng.choice([0.0, 0.0, 0.1, 0.5, 0.95]))
        tb, vb = big.ordered()
        ts, vs = small.ordered()
        assert np.array_equal(tb, ts, equal_nan=True) and np.array_equal(vb, vs, equal_nan=True)
        span = max(cap, 3) * 2.0
        for _ in range(4):
            start = rng.uniform(-span, span * 2)
            end = start + rng.choice([0.0, rng.uniform(0, span), 1e9])
            wb, ws = big.window(start, end), small.window(start, end)
            assert np.array_equal(wb[0], ws[0]) and np.array_equal(wb[1], ws[1], equal_nan=True)
            for kind in AGGREGATIONS:
                want, got = big.query(start, end, kind), small.query(start, end, kind)
                assert got == want, (cap, start, end, kind)
                if got is not None:  # the same floats, not just equal ones (-0.0, types)
                    assert repr(got) == repr(want)


def test_pairwise_sum_is_numpys_add_reduce():
    # sequential below 8 values, 8 accumulators up to 128, halves above: every length to 300, then some to 2000
    rng = random.Random(11)
    for n in list(range(0, 300)) + [rng.randint(300, 2000) for _ in range(50)]:
        values = [rng.random() * 10 ** rng.randint(0, 15) for _ in range(n)]
        a = np.array(values)
        assert pairwise_sum(values) == float(a.sum())
        assert pairwise_sum(tuple(values)) == float(np.array([values, values]).T[:, 1].sum())  # strided, too


def test_percentile_index_is_the_float32_one():
    for n in range(1, 2000):
        for p in (0.5, 0.9, 0.95, 0.99):
            assert percentile_index(n, p) == max(int(np.float32(n) * np.float32(p)) - 1, 0)
    values = np.array([3.0, 1.0, 2.0])
    assert percentile(values, 0.99) == 2.0  # float32(3) * float32(0.99) = 2.97 -> 1


def test_the_store_uses_the_fast_path_only_for_small_buffers():
    assert isinstance(make_series(SMALL_CAPACITY), SmallSeries)
    assert isinstance(make_series(SMALL_CAPACITY + 1), Series)
    # the replay: 5-minute samples over 15 minutes; the agent: 1 s rounds over 5 minutes (and 30)
    replay = MetricStore(900.0, 300.0)
    replay.record("pod/a", 0.0, 1.0, 2.0)
    assert isinstance(replay.series["pod/a"], SmallSeries)
    agent = MetricStore(1800.0, 1.0, short_retention=300.0, long_keys=("node",))
    agent.record("node", 0.0, 1.0, 2.0)
    agent.record("pod/a", 0.0, 1.0, 2.0)
    assert isinstance(agent.series["node"], Series) and isinstance(agent.series["pod/a"], Series)


def test_resizing_crosses_between_the_two_kinds_keeping_the_newest_samples():
    store = MetricStore(20.0, 1.0)  # capacity 22: numpy
    for k in range(30):
        store.record("node", float(k), None if k == 3 else float(k), float(2 * k))
    before = store.series["node"].ordered()
    store.configure(5.0, 1.0)  # capacity 7: Python lists
    small = store.series["node"]
    assert isinstance(small, SmallSeries) and small.capacity == 7
    t, v = small.ordered()
    assert np.array_equal(t, before[0][-7:]) and np.array_equal(v, before[1][-7:])
    store.configure(40.0, 1.0)  # and back
    big = store.series["node"]
    assert isinstance(big, Series) and np.array_equal(big.ordered()[0], t)
    assert store.query("node", 23.0, 29.0, "avg") == ({"cpu": 26.0, "memory": 52.0}, 6.0)


def test_a_window_without_cpu_or_memory_gives_nothing():
    for s in (Series(4), SmallSeries(4)):
        s.add(1.0, None, 5.0)
        s.add(2.0, None, 7.0)
        assert s.query(0.0, 3.0, "avg") is None and s.query(0.0, 3.0, "p90") is None
        s.add(3.0, 4.0, None)
        assert s.query(0.0, 3.0, "avg") == ({"cpu": 4.0, "memory": 6.0}, 0.0)
        assert s.query(3.0, 3.0, "avg") is None
        assert math.isnan(s.ordered()[1][0, 0])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy's inf - inf
def test_infinities_give_numpys_nan_not_a_missing_value():
    # inf - inf sums to NaN without any value missing: the figures stay numpy's (NaN), nothing is dropped
    for s in (Series(4), SmallSeries(4)):
        s.add(1.0, math.inf, 1.0)
        s.add(2.0, -math.inf, 3.0)
        got = s.query(0.0, 3.0, "avg")
        assert got is not None and math.isnan(got[0]["cpu"]) and got[0]["memory"] == 2.0 and got[1] == 1.0
        assert s.query(0.0, 3.0, "p50") == ({"cpu": -math.inf, "memory": 1.0}, 1.0)
