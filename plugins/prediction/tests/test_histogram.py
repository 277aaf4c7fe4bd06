"""Koordinator's ``pkg/util/histogram`` tests (histogram_test.go, decaying_histogram_test.go,
histogram_options_test.go), ported with the same inputs and expectations."""

from __future__ import annotations

import math

import pytest
from koordfw_prediction import CPU_OPTIONS, MEMORY_OPTIONS, DecayingHistogram, ExponentialOptions, Histogram
from koordfw_prediction.histogram import MAX_CHECKPOINT_WEIGHT, ZERO_TIME, LinearOptions

WEIGHT_EPS = 1e-15
OPTS = LinearOptions.new(10.0, 1.0, WEIGHT_EPS)
ANY = 0.0
START = 1234567890.0
HOUR = 3600.0


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-15)


def test_linear_histogram_options():
    o = LinearOptions.new(5.0, 0.3, 0.001)
    assert o.num_buckets == 18 and o.bucket_start(0) == 0.0 and close(o.bucket_start(17), 5.1)
    assert [o.find_bucket(v) for v in (-1.0, 0.0, 1.3, 100.0)] == [0, 0, 4, 17]


def test_exponential_histogram_options():
    o = ExponentialOptions.new(500.0, 40.0, 1.5, 0.001)
    assert o.num_buckets == 6
    assert [o.bucket_start(b) for b in range(6)] == [0.0, 40.0, 100.0, 190.0, 325.0, 527.5]
    assert [o.find_bucket(v) for v in (-1.0, 39.99, 40.0, 100.0, 900.0)] == [0, 0, 1, 2, 5]


def test_the_predictors_histograms():
    # 1024 cores from 0.025, 2 TiB from 5 MiB, 5 % growth (predict_server.go)
    assert CPU_OPTIONS.num_buckets == math.ceil(math.log(1024 * 0.05 / 0.025 + 1) / math.log(1.05)) + 1 == 158
    assert MEMORY_OPTIONS.num_buckets == math.ceil(math.log(2**41 * 0.05 / (5 << 20) + 1) / math.log(1.05)) + 1


@pytest.mark.parametrize("p", [-0.5, 0.0, 0.5, 1.0, 1.5])
def test_percentiles_empty_histogram(p):
    assert Histogram(OPTS).percentile(p) == 0.0
    assert DecayingHistogram(OPTS, HOUR).percentile(p) == 0.0


def test_percentiles():
    h = Histogram(OPTS)
    for i in range(1, 5):
        h.add_sample(float(i), float(i), ANY)
    want = {0.0: 2, 0.1: 2, 0.2: 3, 0.3: 3, 0.4: 4, 0.5: 4, 0.6: 4, 0.7: 5, 0.8: 5, 0.9: 5, 1.0: 5}
    assert {p: h.percentile(p) for p in want} == want


def test_percentile_out_of_bounds():
    h = Histogram(LinearOptions.new(1.0, 0.1, WEIGHT_EPS))
    h.add_sample(0.1, 0.1, ANY)
    h.add_sample(0.2, 0.2, ANY)
    assert close(h.percentile(-0.1), 0.2) and close(h.percentile(1.1), 0.3)
    h.add_sample(0.0, 0.1, ANY)
    h.add_sample(1.0, 0.2, ANY)
    assert close(h.percentile(-0.1), 0.1) and close(h.percentile(1.1), 1.0)


def test_empty_histogram():
    h = Histogram(LinearOptions.new(1.0, 0.1, WEIGHT_EPS))
    assert h.is_empty()
    h.add_sample(0.1, WEIGHT_EPS * 2.5, ANY)
    assert not h.is_empty()
    h.subtract_sample(0.1, WEIGHT_EPS, ANY)
    assert not h.is_empty()
    h.subtract_sample(0.1, WEIGHT_EPS, ANY)
    assert h.is_empty()


def test_non_empty_on_epsilon_addition():
    h = Histogram(LinearOptions.new(1.0, 0.1, WEIGHT_EPS))
    h.add_sample(9.9, WEIGHT_EPS * 3, ANY)
    assert not h.is_empty()
    h.add_sample(0.1, WEIGHT_EPS * 0.3, ANY)
    assert not h.is_empty()
    h.add_sample(999.9, WEIGHT_EPS * 0.3, ANY)
    assert not h.is_empty()


def test_save_to_checkpoint_empty():
    ck = Histogram(OPTS).save()
    assert ck["totalWeight"] == 0.0 and ck["bucketWeights"] == {}


def test_save_to_checkpoint():
    h = Histogram(OPTS)
    h.add_sample(1, 1, ANY)
    ck = h.save()
    assert ck == {"totalWeight": 1.0, "bucketWeights": {str(OPTS.find_bucket(1)): MAX_CHECKPOINT_WEIGHT}}


def test_save_to_checkpoint_drops_relatively_small_values():
    h = Histogram(OPTS)
    h.add_sample(1.0, 1.0, ANY)
    h.add_sample(2.0, 100000.0, ANY)
    ck = h.save()
    assert ck == {"totalWeight": 100001.0, "bucketWeights": {str(OPTS.find_bucket(2.0)): MAX_CHECKPOINT_WEIGHT}}


def test_save_to_checkpoint_for_multiple_values():
    h = Histogram(OPTS)
    for v, w in ((1.0, 1.0), (2.0, 10000.0), (3.0, 50.0)):
        h.add_sample(v, w, ANY)
    ck = h.save()
    assert ck["totalWeight"] == 10051.0
    assert ck["bucketWeights"] == {str(OPTS.find_bucket(1.0)): 1, str(OPTS.find_bucket(2.0)): 10000,
                                   str(OPTS.find_bucket(3.0)): 50}


def test_load_from_checkpoint_and_errors():
    h = Histogram(OPTS)
    h.load({"totalWeight": 6.0, "bucketWeights": {"1": 1, "2": 2}})
    assert close(h.total_weight, 6.0) and close(h.bucket_weight[1], 2.0) and close(h.bucket_weight[2], 4.0)
    for bad in ({"totalWeight": -1.0}, {"totalWeight": 1.0, "bucketWeights": {"99": 1}},
                {"totalWeight": 1.0, "bucketWeights": {"-1": 1}}, {"totalWeight": 1.0, "bucketWeights": {"x": 1}}):
        with pytest.raises(ValueError):
            Histogram(OPTS).load(bad)


def test_simple_decay():
    h = DecayingHistogram(OPTS, HOUR)
    h.add_sample(2, 1000, START)
    h.add_sample(1, 1, START + 20 * HOUR)
    assert close(h.percentile(0.999), 2) and close(h.percentile(1.0), 3)


def test_longterm_decay():
    h = DecayingHistogram(OPTS, HOUR)
    h.add_sample(2, 1, START)
    h.add_sample(1, 1, START + 101 * HOUR)
    assert close(h.percentile(1.0), 2)


def test_decaying_histogram_percentiles():
    h = DecayingHistogram(OPTS, HOUR)
    for i in range(1, 5):
        h.add_sample(float(i), float(i), START + (i - 1) * HOUR)
    want = {0.0: 2, 0.02: 2, 0.03: 3, 0.10: 3, 0.11: 4, 0.34: 4, 0.35: 5, 1.0: 5}
    assert {p: h.percentile(p) for p in want} == want


def test_no_decay():
    h = DecayingHistogram(OPTS, HOUR)
    for i in range(1, 5):
        h.add_sample(float(i), float(i), START)
    want = {0.0: 2, 0.2: 3, 0.1: 2, 0.3: 3, 0.4: 4, 0.5: 4, 0.6: 4, 0.7: 5, 0.8: 5, 0.9: 5, 1.0: 5}
    assert {p: h.percentile(p) for p in want} == want


def test_decaying_histogram_save_to_checkpoint():
    d = DecayingHistogram(OPTS, HOUR)
    d.add_sample(2, 1, START + 100 * HOUR)
    assert d.reference != ZERO_TIME
    ck = d.save()
    assert ck["referenceTimestamp"] != "0001-01-01T00:00:00Z" and ck["bucketWeights"] and ck["totalWeight"]


def test_decaying_histogram_load_from_checkpoint():
    d = DecayingHistogram(OPTS, HOUR)
    d.load({"totalWeight": 6.0, "bucketWeights": {"0": 1}, "referenceTimestamp": "2018-01-02T03:04:05Z"})
    assert not d.is_empty()
    assert d.reference == 1514862245.0


def test_a_decaying_checkpoint_round_trips():
    d = DecayingHistogram(CPU_OPTIONS, 12 * HOUR)
    for i in range(100):
        d.add_sample(0.5 + (i % 10) * 0.1, 1.0, START + i * 60)
    e = DecayingHistogram(CPU_OPTIONS, 12 * HOUR)
    e.load(d.save())
    assert e.reference == d.reference
    for p in (0.5, 0.9, 0.95, 0.98, 1.0):
        assert e.percentile(p) == d.percentile(p)
