"""``koordfw.BoundedCache`` and ``koordfw.memo``: the kernel's one cache helper. Bounded (never more than
``maxsize`` entries), oldest added out first, keyed by values (equal keys share an entry, whatever object
carries them), exceptions not cached."""

from __future__ import annotations

import attrs
import pytest

from koordfw import BoundedCache, IdentityKey, memo


def test_bound_and_oldest_out_first():
    c: BoundedCache[str, int] = BoundedCache(3)
    for i, k in enumerate("abc"):
        c[k] = i
    assert len(c) == 3 and c.get("a") == 0
    c["d"] = 3  # full: "a", the oldest added, goes (a hit does not refresh it)
    assert "a" not in c and [k in c for k in "bcd"] == [True, True, True] and len(c) == 3
    c["e"] = 4
    assert "b" not in c and len(c) == 3
    c["c"] = 20  # replacing a key drops nothing
    assert len(c) == 3 and c["c"] == 20 and "d" in c and "e" in c
    c["f"] = 5  # "c" is still the oldest added
    assert "c" not in c and sorted(c._data) == ["d", "e", "f"]


def test_get_default_get_or_set_clear():
    c: BoundedCache[tuple[str, int], str] = BoundedCache(2)
    assert c.get(("x", 1)) is None and c.get(("x", 1), "d") == "d"
    with pytest.raises(KeyError):
        c[("x", 1)]
    calls: list[int] = []

    def compute() -> str:
        calls.append(1)
        return "v"

    assert c.get_or_set(("x", 1), compute) == "v" and c.get_or_set(("x", 1), compute) == "v"
    assert calls == [1]
    c.clear()
    assert len(c) == 0 and ("x", 1) not in c
    with pytest.raises(ValueError):
        BoundedCache(0)


@attrs.frozen
class Quantity:
    text: str


def test_memo_keys_by_value_not_identity():
    calls: list[str] = []

    @memo(2)
    def parse(q: Quantity, scale: int = 1) -> int:
        calls.append(q.text)
        return int(q.text) * scale

    # two equal objects (different ids) are one entry
    assert parse(Quantity("3")) == 3 and parse(Quantity("3")) == 3 and calls == ["3"]
    assert parse(Quantity("3"), scale=2) == 6 and calls == ["3", "3"]  # keyword arguments are part of the key
    assert len(parse.cache) == 2  # type: ignore[attr-defined]
    parse(Quantity("4"))  # full: the oldest ("3", no scale) goes
    assert len(parse.cache) == 2 and parse(Quantity("3")) == 3 and calls == ["3", "3", "4", "3"]  # type: ignore[attr-defined]
    assert parse.__name__ == "parse"


def test_memo_does_not_cache_exceptions():
    calls: list[str] = []

    @memo(4)
    def strict(text: str) -> int:
        calls.append(text)
        return int(text)

    for _ in range(2):
        with pytest.raises(ValueError):
            strict("x")
    assert calls == ["x", "x"] and len(strict.cache) == 0  # type: ignore[attr-defined]


def test_memo_bound_holds_under_many_keys():
    @memo(16)
    def double(n: int) -> int:
        return 2 * n

    assert [double(i) for i in range(1000)] == [2 * i for i in range(1000)]
    assert len(double.cache) == 16 and 999 in [k[0] for k in double.cache._data]  # type: ignore[attr-defined]


def test_identity_key_holds_and_compares_the_very_objects():
    a, b = {"x": 1}, {"x": 1}  # equal dicts, different objects (dicts have no value hash)
    k = IdentityKey(a, b)
    assert k == IdentityKey(a, b) and hash(k) == hash(IdentityKey(a, b))
    assert k != IdentityKey(b, a) and k != IdentityKey(a) and k != IdentityKey(a, {"x": 1})
    assert (3, k) == (3, IdentityKey(a, b)) and (4, k) != (3, IdentityKey(a, b))
    c: BoundedCache[IdentityKey, str] = BoundedCache(4)
    c[k] = "ab"
    assert c.get(IdentityKey(a, b)) == "ab" and IdentityKey(a, dict(b)) not in c
    # the key holds its objects: one made for a dropped object stays that object's
    key = IdentityKey({"y": 2})
    held = key.objects[0]
    del held
    assert key.objects[0] == {"y": 2} and key == key
