"""Table tests of the water-filling, the Hamilton rounding and the min scaling (pure integers)."""

import pytest
from koordfw_elastic_quota import Child, hamilton, redistribute, scale_mins


@pytest.mark.parametrize("res, weights, want", [
    ("even", {"a": 1, "b": 1}, None),
    (100, {"a": 2, "b": 1}, {"a": 67, "b": 33}),  # remainders 2 > 1
    (100, {"b": 1, "a": 1, "c": 1}, {"a": 34, "b": 33, "c": 33}),  # equal remainders: name order
    (2, {"c": 1, "b": 1, "a": 1}, {"a": 1, "b": 1, "c": 0}),
    (10, {"a": 0, "b": 3}, {"a": 0, "b": 10}),  # zero weight gets nothing
    (0, {"a": 1}, {"a": 0}),
    (7, {"a": 0, "b": 0}, {"a": 0, "b": 0}),
    # products beyond 64 bits stay exact
    (2**62, {"a": 2**62 - 1, "b": 2**62 + 1}, {"a": 2**61, "b": 2**61}),  # half-unit tie → name order
])
def test_hamilton(res, weights, want):
    if res == "even":
        res, want = 100, {"a": 50, "b": 50}
    nodes = [Child(n, 0, weight=w) for n, w in weights.items()]
    got = hamilton(res, nodes)
    assert got == want
    if any(w > 0 for w in weights.values()):
        assert sum(got.values()) == res


def C(name, request, min=0, weight=1, guarantee=0, lent=True):
    return Child(name, request, min, guarantee, weight, lent)


@pytest.mark.parametrize("case, total, children, want", [
    ("two equal borrowers", 100, [C("a", 60, 20), C("b", 60, 20)], {"a": 50, "b": 50}),
    ("idle share is lent", 100, [C("a", 100, 20), C("b", 0, 50)], {"a": 100, "b": 0}),
    ("owner back: min kept", 100, [C("a", 100, 20), C("b", 50, 50)], {"a": 50, "b": 50}),
    ("capped child re-shares", 100, [C("a", 10, 0), C("b", 200, 0)], {"a": 10, "b": 90}),
    ("weights 2:1 with remainder", 100, [C("a", 100, 0, 2), C("b", 100, 0, 1)], {"a": 67, "b": 33}),
    ("zero weight gets only min", 80, [C("a", 50, 10, 0), C("b", 50, 0, 1)], {"a": 10, "b": 50}),
    ("zero weight, excess stays", 80, [C("a", 50, 0, 0), C("b", 50, 0, 1)], {"a": 0, "b": 50}),
    ("not lent keeps min", 100, [C("a", 10, 40, lent=False), C("b", 100, 0)], {"a": 40, "b": 60}),
    ("lent gives min away", 100, [C("a", 10, 40, lent=True), C("b", 100, 0)], {"a": 10, "b": 90}),
    ("guarantee above min", 100, [C("a", 50, 10, guarantee=30), C("b", 100, 10)], {"a": 50, "b": 50}),
    ("guarantee holds used", 60, [C("a", 50, 10, guarantee=40), C("b", 100, 10)], {"a": 45, "b": 15}),
    ("name-ordered tie", 101, [C("b", 100, 0), C("a", 100, 0)], {"a": 51, "b": 50}),
    ("three-way cascade", 90, [C("a", 10, 0), C("b", 25, 0), C("c", 100, 0)], {"a": 10, "b": 25, "c": 55}),
    ("mins over total", 50, [C("a", 100, 40), C("b", 100, 40)], {"a": 40, "b": 40}),
])
def test_redistribute(case, total, children, want):
    assert redistribute(total, children) == want


@pytest.mark.parametrize("total, mins, enabled, want", [
    (100, {"a": 60, "b": 40}, {}, {"a": 60, "b": 40}),  # fits: originals
    (100, {"a": 80, "b": 40}, {}, {"a": 66, "b": 33}),  # truncated, 1 left over
    (10000, {"a": 7000, "b": 5000}, {}, {"a": 5833, "b": 4166}),
    (100, {"a": 80, "b": 40}, {"b": False}, {"a": 60, "b": 40}),
    (30, {"a": 80, "b": 40}, {"b": False}, {"a": 0, "b": 40}),  # nothing left for the enabled
    (0, {"a": 1, "b": 1}, {}, {"a": 0, "b": 0}),
    (3, {"a": 1, "b": 9}, {}, {"a": 0, "b": 2}),  # int64(float64) truncation
])
def test_scale_mins(total, mins, enabled, want):
    assert scale_mins(total, mins, enabled) == want
