"""Table tests of the formulas, the schemata format and support detection (against the fake tree)."""

from __future__ import annotations

import pytest
from koordfw_llc_isolation.resctrl import (
    AMD,
    INTEL,
    ResctrlError,
    ResctrlInfo,
    detect,
    l3_line,
    l3_mask,
    mb_line,
    mba_value,
    parse_cbm,
    parse_schemata,
    read_group,
    read_mon_data,
)

from koordfw.testing.resctrl import FakeResctrl


@pytest.mark.parametrize("cbm, start, end, min_bits, want", [
    # the examples in Koordinator's CalculateCatL3MaskValue
    ("3ff", 10, 80, 1, "fe"),
    ("7ff", 10, 50, 1, "3c"),
    ("7ff", 0, 30, 1, "f"),
    # the defaults: LSR/LS everything, BE the lowest 30%
    ("7ff", 0, 100, 1, "7ff"),
    ("fffff", 0, 100, 1, "fffff"),
    ("fffff", 0, 30, 1, "3f"),
    ("ffff", 0, 30, 1, "1f"),
    ("ffff", 50, 100, 1, "ff00"),
    ("fff", 30, 100, 1, "ff0"),
    ("1", 0, 100, 1, "1"),
    ("7ff", 0, 30, 4, "f"),
    ("ffffffff", 25, 75, 2, "ffff00"),
])
def test_l3_mask(cbm, start, end, min_bits, want):
    assert format(l3_mask(cbm, start, end, min_bits), "x") == want


@pytest.mark.parametrize("cbm, start, end, min_bits, message", [
    ("7f5", 0, 100, 1, "not a contiguous block"),
    ("ff0", 0, 100, 1, "not a contiguous block"),
    ("0", 0, 100, 1, "not a contiguous block"),
    ("xyz", 0, 100, 1, "not a hex number"),
    ("7ff", 30, 30, 1, "need 0 <= start < end <= 100"),
    ("7ff", 50, 20, 1, "need 0 <= start < end <= 100"),
    ("7ff", -1, 20, 1, "need 0 <= start < end <= 100"),
    ("7ff", 0, 101, 1, "need 0 <= start < end <= 100"),
    ("7ff", 0, 30, 5, "fewer than min_cbm_bits=5"),
    ("7ff", 91, 95, 1, "selects 0 way(s)"),
    ("7ff", 0, 30.5, 1, "catRangeEndPercent must be an integer"),
])
def test_l3_mask_invalid(cbm, start, end, min_bits, message):
    with pytest.raises(ResctrlError, match=None) as e:
        l3_mask(cbm, start, end, min_bits)
    assert message in str(e.value)


@pytest.mark.parametrize("pct, vendor, want", [
    (100, INTEL, 100), (90, INTEL, 90), (85, INTEL, 90), (81, INTEL, 90), (1, INTEL, 10), (10, INTEL, 10),
    (50, INTEL, 50),
    (100, AMD, 2048), (50, AMD, 80), (33, AMD, 52), (1, AMD, 1), (99, AMD, 158), (10, AMD, 16),
    (0, INTEL, None), (101, INTEL, None), (-5, AMD, None), (None, INTEL, None), (0, AMD, None),
])
def test_mba_value(pct, vendor, want):
    assert mba_value(pct, vendor) == want


def test_mba_value_respects_granularity_and_minimum():
    assert mba_value(15, INTEL, step=20) == 20
    assert mba_value(5, INTEL, step=10, minimum=20) == 20


def test_mba_value_unknown_vendor():
    with pytest.raises(ResctrlError, match="HygonGenuine"):
        mba_value(50, "HygonGenuine")


@pytest.mark.parametrize("ids, value, line", [
    ((0, 1), 0x3c, "L3:0=3c;1=3c;\n"),
    ((1, 0), 0x7ff, "L3:0=7ff;1=7ff;\n"),
    ((0, 2, 4, 6), 0xf, "L3:0=f;2=f;4=f;6=f;\n"),
    ((0,), {0: 0x1}, "L3:0=1;\n"),
])
def test_l3_line(ids, value, line):
    assert l3_line(ids, value) == line


@pytest.mark.parametrize("ids, value, line", [
    ((0, 1), 90, "MB:0=90;1=90;\n"),
    ((0, 1, 2, 3), 2048, "MB:0=2048;1=2048;2=2048;3=2048;\n"),
    ((0, 1), {1: 50, 0: 100}, "MB:0=100;1=50;\n"),
])
def test_mb_line(ids, value, line):
    assert mb_line(ids, value) == line


@pytest.mark.parametrize("text, want", [
    ("L3:0=fff;1=fff\nMB:0=100;1=100\n", {"L3": {0: 0xfff, 1: 0xfff}, "MB": {0: 100, 1: 100}}),
    ("    L3:0=07ff;1=07ff\n    MB:0= 50;1= 50\n", {"L3": {0: 0x7ff, 1: 0x7ff}, "MB": {0: 50, 1: 50}}),
    ("L3:0=3c;1=3c;\n", {"L3": {0: 0x3c, 1: 0x3c}}),
    ("L3CODE:0=ff\nL3DATA:0=f0\n", {"L3CODE": {0: 0xff}, "L3DATA": {0: 0xf0}}),
    ("L2:0=ff;1=ff\nL3:0=fffff\n", {"L2": {0: 0xff, 1: 0xff}, "L3": {0: 0xfffff}}),
    ("", {}),
])
def test_parse_schemata(text, want):
    assert parse_schemata(text) == want


@pytest.mark.parametrize("text, message", [
    ("L3 0=ff\n", "is not '<resource>:<id>=<value>"),
    ("L3:0ff\n", "bad domain"),
    ("MB:0=ab\n", "not a decimal value"),
    ("L3:x=ff\n", "bad domain"),
])
def test_parse_schemata_invalid(text, message):
    with pytest.raises(ResctrlError) as e:
        parse_schemata(text, source="BE/schemata")
    assert "BE/schemata" in str(e.value) and message in str(e.value)


def test_parse_cbm_accepts_kernel_text():
    assert parse_cbm("7ff\n") == 0x7ff
    assert parse_cbm("0xFFFF") == 0xffff


# -- detection -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, want", [
    (dict(), ResctrlInfo(cbm_mask="7ff", min_cbm_bits=1, num_closids=8, cache_ids=(0, 1), vendor=INTEL,
                         mba=True, mba_gran=10, mba_min=10)),
    (dict(cbm_mask="fffff", cache_ids=(0, 1, 2, 3), mba=False, num_closids=16, min_cbm_bits=2),
     ResctrlInfo(cbm_mask="fffff", min_cbm_bits=2, num_closids=16, cache_ids=(0, 1, 2, 3), vendor=INTEL,
                 mba=False, mba_gran=10, mba_min=0)),
    (dict(cbm_mask="ffff", cache_ids=(0, 2, 4), vendor=AMD, num_closids=16),
     ResctrlInfo(cbm_mask="ffff", min_cbm_bits=1, num_closids=16, cache_ids=(0, 2, 4), vendor=AMD, mba=True,
                 mba_gran=1, mba_min=0)),
])
def test_detect(tmp_path, kw, want):
    fake = FakeResctrl(tmp_path / "resctrl", **kw)
    support = detect(fake.root, cpuinfo=fake.cpuinfo)
    assert support.reason == ""
    assert support.info == want


def test_detect_not_mounted(tmp_path):
    filesystems = tmp_path / "filesystems"
    filesystems.write_text("nodev\tsysfs\nnodev\tcgroup\n")
    s = detect(tmp_path / "absent", filesystems=filesystems)
    assert not s.supported
    assert "not mounted" in s.reason and "no resctrl filesystem" in s.reason
    filesystems.write_text("nodev\tsysfs\nnodev\tresctrl\n")
    s = detect(tmp_path / "absent", filesystems=filesystems)
    assert "mount -t resctrl resctrl" in s.reason


def test_detect_this_machine():
    """This machine has no resctrl: detection says why and does not raise."""
    s = detect("/sys/fs/resctrl")
    if s.supported:
        pytest.skip("resctrl is mounted here")
    assert "/sys/fs/resctrl" in s.reason


def test_detect_without_cat(tmp_path):
    fake = FakeResctrl(tmp_path / "r")
    for f in (fake.root / "info" / "L3").iterdir():
        f.unlink()
    (fake.root / "info" / "L3").rmdir()
    s = detect(fake.root, cpuinfo=fake.cpuinfo)
    assert not s.supported and "no L3 cache allocation" in s.reason


# -- the fake behaves like the kernel ---------------------------------------------------------------


def test_fake_prints_kernel_format(tmp_path):
    fake = FakeResctrl(tmp_path / "r", cbm_mask="7ff", cache_ids=(0, 1))
    assert (fake.root / "schemata").read_text() == "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"
    fake.mkdir("BE")
    fake.write("BE", "schemata", "L3:0=f;1=f;\n")
    fake.write("BE", "schemata", "MB:1=55;\n")
    assert (fake.root / "BE" / "schemata").read_text() == "L3:0=00f;1=00f\nMB:0=100;1= 60\n"
    assert read_group(fake.root, "BE").schemata == {"L3": {0: 0xf, 1: 0xf}, "MB": {0: 100, 1: 60}}


@pytest.mark.parametrize("data, message", [
    ("L3:0=70f;\n", "Non-contiguous"),
    ("L3:0=1000;\n", "Mask out of range"),
    ("L3:7=f;\n", "Unknown domain ID: 7"),
    ("L2:0=f;\n", "Unknown or unsupported resource"),
    ("MB:0=5;\n", "out of range"),
])
def test_fake_rejects_like_the_kernel(tmp_path, data, message):
    fake = FakeResctrl(tmp_path / "r")
    fake.mkdir("BE")
    with pytest.raises(OSError):
        fake.write("BE", "schemata", data)
    assert message in (fake.root / "info" / "last_cmd_status").read_text()
    assert fake.schemata("BE")["L3"] == {0: 0x7ff, 1: 0x7ff}


def test_fake_tasks_move_and_closids(tmp_path):
    fake = FakeResctrl(tmp_path / "r", num_closids=3, mba=False, pids=(1, 10, 11))
    fake.mkdir("LS")
    fake.mkdir("BE")
    with pytest.raises(OSError, match="out of CLOSIDs"):
        fake.mkdir("LSR")
    fake.write("BE", "tasks", "10")
    assert fake.tasks("BE") == {10} and 10 not in fake.tasks("")
    fake.write("LS", "tasks", "10")
    assert fake.tasks("BE") == set() and fake.tasks("LS") == {10}
    with pytest.raises(OSError, match="No task 99"):
        fake.write("LS", "tasks", "99")


def test_mon_data_sums_domains(tmp_path):
    fake = FakeResctrl(tmp_path / "r", cache_ids=(0, 1))
    fake.mkdir("BE")
    fake.set_mon("BE", {0: {"llc_occupancy": 1000, "mbm_total_bytes": 7}, 1: {"llc_occupancy": 24}})
    (fake.root / "BE" / "mon_data" / "mon_L3_01" / "mbm_total_bytes").write_text("Unavailable\n")
    assert read_mon_data(fake.root, "BE") == {"llc_occupancy": 1024, "mbm_total_bytes": 7, "mbm_local_bytes": 0}
    assert read_mon_data(fake.root, "gone") == {}
