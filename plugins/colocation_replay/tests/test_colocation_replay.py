"""koordfw replay colocation: hand-computed accounting, a tiny slice of the real traces, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import anyio
import pytest
from koordfw_colocation_replay import Replay, TraceError, load_batch, load_ls, recommended_profile

from koordfw.cli import main

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data"
LS_DIR = DATA / "bitbrains-rnd-2013-07"
BATCH_DIR = DATA / "alibaba-batch-v2018"
T0 = 1372636800  # 2013-07-01 00:00 UTC
GiB = 2**30


def write_ls(d: Path, vms: list[tuple[int, int, float]], slots: int) -> Path:
    """VMs (id, cores, fraction of the cores used) for ``slots`` slots; 2,600 MHz per core, 8 GiB each."""
    d.mkdir(parents=True, exist_ok=True)
    lines = ["vm,t,cores,cap_mhz,use_mhz,mem_prov_kb,mem_used_kb"]
    for k in range(slots):
        for vm, cores, used in vms:
            lines.append(f"{vm},{T0 + 300 * k},{cores},{cores * 2600.0},{cores * 2600.0 * used},8388608,1048576")
    with gzip.open(d / "vm_usage_5min.csv.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    return d


def write_batch(d: Path, tasks: list[tuple]) -> Path:
    """Tasks (arrival, job, name, inst, duration, plan_cpu, cpu) with plan_mem 0.1 % (0.5 GiB)."""
    d.mkdir(parents=True, exist_ok=True)
    t = ["arrival_s,job_id,task_name,duration_s,plan_cpu,plan_mem,inst_num"]
    u = ["job_id,task_name,instances_seen,mean_duration_s,mean_cpu_avg,mean_mem_avg"]
    for arrival, job, name, inst, dur, plan, cpu in tasks:
        t.append(f"{arrival},{job},{name},{dur},{plan},0.1,{inst}")
        u.append(f"{job},{name},{inst},{dur},{cpu},0.05")
    (d / "batch_task.csv").write_text("\n".join(t) + "\n")
    (d / "batch_task_usage.csv").write_text("\n".join(u) + "\n")
    return d


class EvictAfterFirstSlot(Replay):
    """Evicts every executor at the end of the first slot (as the node agent would)."""

    async def _advance(self, now: float, end: float) -> None:
        await super()._advance(now, end)
        if now == self.ls.start:
            self._settle_all(end)
            for e in [e for e in self.executors.values() if e.node >= 0]:
                await self._evict(e, end)


def run(tmp_path: Path, vms: list, tasks: list, slots: int, mode: str = "kubernetes", cls: type = Replay,
        node_cpu: float = 8.0) -> Replay:
    ls = load_ls(write_ls(tmp_path / "ls", vms, slots))
    batch = load_batch(write_batch(tmp_path / "batch", tasks))
    r = cls(ls, batch, mode=mode, nodes=1, node_cpu=node_cpu, node_memory=64 * GiB, slots=ls.slots,
            batch_fraction=1.0, seed=1, profile=recommended_profile())
    r.result = anyio.run(r.run)
    return r


def test_instance_stretched_by_the_cpu_it_does_not_get(tmp_path: Path) -> None:
    # one 16-core node; the LS VM (8 cores) uses all its cores, so 8 are left; the instance plans 8 cores
    # (an executor of one lane) and uses 12: it gets 8, runs 600 s × 12/8 = 900 s, 3 slots, 4 cores throttled
    r = run(tmp_path, [(1, 8, 1.0)], [(0, "j_1", "M1", 1, 600, 800, 1200)], slots=6, node_cpu=16)
    s = r.result.summary
    assert s["batch_instances_completed"] == 1
    assert r.finished_at[0] - r.ls.start == pytest.approx(900.0)
    assert s["batch_cpu_hours"] == pytest.approx(8 * 900 / 3600)
    assert s["be_throttled_cpu_hours"] == pytest.approx(4 * 900 / 3600)
    assert s["node_over_capacity_slot_fraction"] == pytest.approx(3 / 6)  # LS 8 + BE demand 12 > 16
    assert s["ls_starved_slots"] == 0
    assert s["batch_wait_p99_s"] == 0.0


def test_evicted_instance_loses_its_progress_and_is_retried(tmp_path: Path) -> None:
    # a 600 s instance at 1 core on an idle node: evicted at 300 s it has run half, which is lost; its
    # executor comes back pending, is placed again at 300 s and reruns the whole instance: done at 900 s
    r = run(tmp_path, [(1, 2, 0.0)], [(0, "j_1", "M1", 1, 600, 100, 100)], slots=6, cls=EvictAfterFirstSlot,
            node_cpu=16)
    s = r.result.summary
    assert s["evictions"] == 1 and s["instances_retried"] == 1
    assert s["batch_instances_completed"] == 1
    assert r.finished_at[0] - r.ls.start == pytest.approx(900.0)
    assert s["batch_cpu_hours"] == pytest.approx(900 / 3600)


def test_dag_child_waits_for_its_parents(tmp_path: Path) -> None:
    # J3_1_2 runs after M1 (100 s) and M2 (250 s) of the same job; R4 of another job has no parents
    tasks = [(0, "j_1", "M1", 1, 100, 100, 100), (0, "j_1", "M2", 1, 250, 100, 100),
             (0, "j_1", "J3_1_2", 2, 50, 100, 100), (0, "j_2", "J3_1_2", 1, 60, 100, 100)]
    r = run(tmp_path, [(1, 2, 0.0)], tasks, slots=3, node_cpu=16)
    names = {(r.tasks[i].job, r.tasks[i].name): i for i in range(len(r.tasks))}
    child = names[("j_1", "J3_1_2")]
    assert r.tasks[child].parents == ("M1", "M2")
    assert r.ready_at[child] == pytest.approx(r.finished_at[names[("j_1", "M2")]])
    assert r.ready_at[child] - r.ls.start == pytest.approx(250.0)
    assert r.finished_at[child] - r.ls.start == pytest.approx(300.0)
    other = names[("j_2", "J3_1_2")]  # its parents are not in the trace: it does not wait
    assert r.tasks[other].parents == () and r.finished_at[other] - r.ls.start == pytest.approx(60.0)
    assert r.result.summary["batch_instances_completed"] == 5


def test_pool_schedules_each_request_withdraws_what_finds_no_node(tmp_path: Path) -> None:
    # one 16-core node, the LS VM requests 8 cores: room for one 8-core executor. Three shapes queue at 0,
    # FIFO by job: A (1 core, 0.5 GiB; 40 lanes wanted), B (2 cores, 2 GiB), C (0.5 core, 0.25 GiB; 4 lanes)
    from koordfw_colocation_replay.traces import Task

    def task(job: str, inst: int, plan_cpu: float, plan_mem: float) -> Task:
        return Task(job, "M1", 0.0, inst, 600.0, plan_cpu, plan_mem * GiB, plan_cpu, plan_mem * GiB, (), inst, "M")

    ls = load_ls(write_ls(tmp_path / "ls", [(1, 8, 0.0)], 1))
    tasks = [task("j_1", 40, 1.0, 0.5), task("j_2", 10, 2.0, 2.0), task("j_3", 4, 0.5, 0.25)]
    r = Replay(ls, tasks, mode="kubernetes", nodes=1, node_cpu=16.0, node_memory=64 * GiB, slots=1,
               batch_fraction=1.0, seed=1, profile=recommended_profile())
    anyio.run(r.run)
    a, b, c = (int(r.shape[i]) for i in range(3))
    bound = [e for e in r.executors.values() if e.node >= 0]
    # A's first request (8 lanes, 8 cores) is placed; its second finds no node: withdrawn, A's next
    # requests are 4 lanes; B's first (4 lanes: 8 cores, 8 GiB) is at least as large as that failed one
    # in both, so it is not made (B's size halves); C's (4 lanes: 2 cores, 1 GiB) is made and fails
    assert [(e.shape, e.lanes) for e in bound] == [(a, 8)]
    assert r._exec_seq == 3 and len(r.executors) == 1
    assert (r.exec_lanes[a], r.exec_lanes[b], r.exec_lanes[c]) == (4, 2, 2)
    assert r.free_lanes[a] == 0 and r.assigned[0] == 8


def test_cpu_eviction_moves_be_off_a_node_whose_ls_usage_rose(tmp_path: Path) -> None:
    # one 16-core node; the LS VM (8 cores) is idle for an hour, then uses all its cores. The batch task
    # (48 one-core instances of 2 h) gets executors for the batch-cpu the idle hour leaves (65 % of 16 less
    # LS usage ~ 10.4 cores). Once LS uses 8 cores, be_suppress leaves BE 70 % of 16 less 8 = 3.2 cores for
    # ~10 cores of demand: satisfaction ~ 30 %, below BECPUEvict's 60 %, so the recommended profile
    # evicts executors until the requests left are at most 3.2 / 80 %; without BECPUEvict they stay,
    # throttled, and LS + BE demand stays above the node's capacity
    from koordfw_colocation_replay import recommended_profile as rec

    slots = 36
    d = tmp_path / "ls"
    d.mkdir()
    lines = ["vm,t,cores,cap_mhz,use_mhz,mem_prov_kb,mem_used_kb"]
    lines += [f"1,{T0 + 300 * k},8,20800.0,{0.0 if k < 12 else 20800.0},8388608,1048576" for k in range(slots)]
    with gzip.open(d / "vm_usage_5min.csv.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    ls = load_ls(d)
    batch = load_batch(write_batch(tmp_path / "batch", [(0, "j_1", "M1", 48, 7200, 100, 100)]))
    no_cpu_evict = rec()
    del no_cpu_evict["pluginConfig"]["eviction"]
    figures = {}
    for name, profile in (("recommended", rec()), ("without", no_cpu_evict)):
        r = Replay(ls, batch, mode="koordfw", nodes=1, node_cpu=16.0, node_memory=64 * GiB, slots=ls.slots,
                   batch_fraction=1.0, seed=1, profile=profile)
        figures[name] = s = anyio.run(r.run).summary
        assert s["ls_starved_slots"] == 0
        bound = [e for e in r.executors.values() if e.node >= 0]
        figures[name]["requests_left"] = sum(e.cpu_req for e in bound)
    rec_s, without = figures["recommended"], figures["without"]
    assert without["evictions"] == 0 and rec_s["evictions"] >= 1  # memory stays far below BEMemoryEvict's 70 %
    assert rec_s["instances_retried"] >= 1
    assert rec_s["requests_left"] <= 3.2 / 0.8 + 1e-9 < without["requests_left"]
    assert rec_s["node_over_capacity_slot_fraction"] < without["node_over_capacity_slot_fraction"]


def test_a_tiny_slice_of_the_real_traces(tmp_path: Path) -> None:
    """8 VMs of the Bitbrains week for 2 hours, the Alibaba hour scaled to them: both modes, exact figures."""
    out = tmp_path / "out.json"
    args = ["replay", "colocation", "--ls-trace", str(LS_DIR), "--batch-trace", str(BATCH_DIR), "--vms", "8",
            "--days", str(2 / 24), "--node-cpu", "16", "--node-memory", "64Gi", "-o", "json"]
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(args) == 0
    out.write_text(buf.getvalue())
    doc = json.loads(out.read_text())
    k, f = doc["modes"]["kubernetes"]["summary"], doc["modes"]["koordfw"]["summary"]
    assert doc["nodes"] == EXPECTED["nodes"]
    for key in ("cpu_utilisation_mean", "batch_instances_completed", "batch_cpu_hours", "evictions",
                "ls_starved_slots"):
        assert (k[key], f[key]) == EXPECTED[key], key
    assert len(doc["modes"]["koordfw"]["hours"]) == 2
    for s in (k, f):
        assert 0 <= s["cpu_utilisation_mean"] <= s["cpu_utilisation_p95"] <= 1
        assert 0 <= s["node_over_capacity_slot_fraction"] <= 1
        assert s["ls_starved_slots"] == 0
    assert f["batch_cpu_hours"] > k["batch_cpu_hours"]


#: the slice's figures (kubernetes, koordfw); 8 VMs fit on one 16-core node, 0.035 % of the jobs each hour
#: (the batch resources at the recommended 65 % reclaim threshold); BECPUEvict evicts 4 executors
EXPECTED: dict = {"nodes": 1, "cpu_utilisation_mean": (0.0677, 0.0871), "batch_instances_completed": (136, 136),
                  "batch_cpu_hours": (1.98, 2.6), "evictions": (0, 4), "ls_starved_slots": (0, 0)}


@pytest.mark.parametrize("case, expected", [
    ("missing", "line 1: missing column(s) inst_num"),
    ("negative", "line 3: column duration_s: negative: '-5'"),
    ("binary", "line 1: not a CSV file"),
    ("text", "line 2: column plan_cpu: not a number: 'lots'"),
])
def test_bad_batch_trace_names_file_line_and_column(tmp_path: Path, case: str, expected: str) -> None:
    d = write_batch(tmp_path / "b", [(0, "j_1", "M1", 1, 10, 100, 50), (1, "j_1", "R2_1", 1, 10, 100, 50)])
    f = d / "batch_task.csv"
    lines = f.read_text().splitlines()
    if case == "missing":
        lines = [",".join(c for c in line.split(",")[:-1]) for line in lines]
    elif case == "negative":
        lines[2] = "1,j_1,R2_1,-5,100,0.1,1"
    elif case == "text":
        lines[1] = "0,j_1,M1,10,lots,0.1,1"
    f.write_text("\n".join(lines) + "\n")
    if case == "binary":
        f.write_bytes(b"\x00\x01\x02PK\x03\x04" * 10)
    with pytest.raises(TraceError) as e:
        load_batch(d)
    assert str(e.value).startswith(str(f)) and expected in str(e.value)


def test_bad_ls_trace_and_the_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    d = write_ls(tmp_path / "ls", [(1, 2, 0.5)], 3)
    f = d / "vm_usage_5min.csv.gz"
    text = gzip.decompress(f.read_bytes()).decode().splitlines()
    text[2] = text[2].replace(",2600.0", ",-3", 1).replace("5200.0", "-3")
    f.write_bytes(gzip.compress(("\n".join(text) + "\n").encode()))
    with pytest.raises(TraceError, match=r"vm_usage_5min.csv.gz: line 3: column cap_mhz: negative"):
        load_ls(d)
    b = write_batch(tmp_path / "b", [(0, "j_1", "M1", 1, 10, 100, 50)])
    assert main(["replay", "colocation", "--ls-trace", str(d), "--batch-trace", str(b), "-o", "json"]) == 2
    err = capsys.readouterr().err
    assert "koordfw: error:" in err and "line 3: column cap_mhz" in err


def test_plot_without_matplotlib_fails_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    import builtins

    real = builtins.__import__

    def no_mpl(name: str, *a: object, **kw: object) -> object:
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    # the traces do not exist: had the run started, the error would name them
    assert main(["replay", "colocation", "--ls-trace", str(tmp_path / "none"), "--batch-trace",
                 str(tmp_path / "none"), "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err
    assert main(["replay", "openb", "--nodes", str(tmp_path / "n.csv"), "--pods", str(tmp_path / "p.csv"),
                 "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_replay_is_a_shared_group() -> None:
    import argparse

    from koordfw.embed import Commands

    parser = argparse.ArgumentParser()
    top = Commands.nested(parser, dest="command")
    a = top.group("replay", help="x")
    b = top.group("replay", help="ignored")
    assert a is b
    a.add("one", help="1").set_defaults(func=lambda _a: 1)
    b.add("two", help="2").set_defaults(func=lambda _a: 2)
    assert parser.parse_args(["replay", "two"]).func(None) == 2
    assert parser.parse_args(["replay"]).func(None) == 2  # the group alone prints its help


def test_front_doors_node_planner_and_update_node_resources() -> None:
    """The agent's plan and the manager's node-resource step as the replay drives them."""
    from koordfw import NodeState, PodState, build_registry
    from koordfw.embed import EmbeddedEngine, NodePlanner, VirtualClock, update_node_resources
    from koordfw.extension import BATCH_CPU
    from koordfw.inputs import make_node, make_pod

    ls = make_pod("ls", "default", requests={"cpu": "4"}, labels={"koordinator.sh/qosClass": "LS"})
    be = make_pod("be", "default", requests={BATCH_CPU: "1000"}, labels={"koordinator.sh/qosClass": "BE"},
                  priorityClassName="koord-batch")
    reg = build_registry({"pluginConfig": {"be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}},
                         only=("be_suppress",))
    planner = NodePlanner(reg, VirtualClock(0.0))
    quota = "cpu/kubepods/besteffort/cpu.cfs_quota_us"
    ns = NodeState(name="n", capacity={"cpu": 8000, "memory": 32 * GiB}, allocatable={"cpu": 8000, "memory": 32 * GiB},
                   usage={"cpu": 3000, "memory": GiB}, cgroups={quota: "-1"},
                   pods=(PodState(ls.uid, ls, "LS", "Burstable", "kubepods/burstable/podls", usage={"cpu": 2000}),
                         PodState(be.uid, be, "BE", "BestEffort", "kubepods/besteffort/podbe", usage={"cpu": 1000})))
    plan = anyio.run(planner.plan, ns)
    # 65 % of 8 cores minus the LS pod's 2: 3.2 cores, 320,000 µs per 100 ms period
    assert [(w.path, w.value, w.plugin) for w in plan.writes if w.path == quota] == [(quota, "320000", "be_suppress")]
    assert plan.evictions == [] and plan.errors == []

    engine = EmbeddedEngine(build_registry({"pluginConfig": {"batch_resource": {"enable": True}}},
                                           only=("batch_resource",)),
                            nodes=[make_node("n", allocatable={"cpu": "8", "memory": "32Gi", "pods": "110"})],
                            start_time=1000.0)
    cluster = engine.view

    def metric(cpu: str) -> dict:
        return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n"},
                "status": {"updateTime": "1970-01-01T00:16:40Z",
                           "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}},
                                          "systemUsage": {"resources": {"cpu": "0", "memory": "0"}}}}}

    last: dict[str, float] = {}
    engine.put_object(metric("1"))
    assert anyio.run(update_node_resources, engine, last) == ["n"] and last == {"n": 1000.0}
    assert cluster.node("n").allocatable[BATCH_CPU] == 8000 * 60 // 100
    engine.put_object(metric("1100m"))  # batch-cpu moves by < 10 %, written just now: no write
    assert anyio.run(update_node_resources, engine, last) == []
    engine.clock.advance_to(1301.0)  # more than updateTimeThresholdSeconds (300) since the write: written
    assert anyio.run(update_node_resources, engine, last) == ["n"] and last == {"n": 1301.0}


def test_progress_log_lines_both_modes_and_the_plot(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Not on a terminal: progress as log lines for both modes (the forked kubernetes one's come back over
    its pipe), "wrote FILE" at the end; the plot's title names the cluster, profile and traces."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "slice.png"
    assert main(["replay", "colocation", "--ls-trace", str(LS_DIR), "--batch-trace", str(BATCH_DIR), "--vms", "8",
                 "--days", str(2 / 24), "--node-cpu", "16", "--node-memory", "64Gi", "-o", "json",
                 "--plot", str(png)]) == 0
    err = capsys.readouterr().err.splitlines()
    for mode in ("kubernetes", "koordfw"):
        lines = [line for line in err if line.startswith(f"koordfw replay: {mode} mode ")]
        assert lines and lines[-1].startswith(f"koordfw replay: {mode} mode 100% (24/24 slots"), err
    assert err[-1] == f"wrote {png}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_log_progress_every_tenth_or_interval() -> None:
    import io

    from koordfw_colocation_replay.command import LogProgress, plot_title

    out = io.StringIO()
    report = LogProgress(out, interval=3600)("koordfw")
    for k in range(1, 1001):
        report(k, 1000)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and lines[0].startswith("koordfw replay: koordfw mode 10% (100/1000")
    out = io.StringIO()
    report = LogProgress(out, interval=0)("kubernetes")  # every call is past the interval
    report(1, 1000)
    report(2, 1000)
    assert len(out.getvalue().splitlines()) == 2
    title = plot_title({"nodes": 39, "node_cpu": 32.0, "node_memory": 128 * GiB, "vms": 427, "slots": 288,
                        "batch_load": 1.0, "seed": 42, "profile": "koordinator", "ls_trace": "bitbrains-rnd-2013-07",
                        "batch_trace": "alibaba-batch-v2018"})
    assert "39 nodes × 32 cores, 128Gi" in title and "koordinator" in title and "bitbrains-rnd-2013-07" in title
    assert "alibaba-batch-v2018" in title


@pytest.mark.parametrize("value, eps", [("risk:0.5%", 0.005), ("risk:0.01", 0.01), ("risk:1%", 0.01)])
def test_risk_profiles_by_name(value: str, eps: float) -> None:
    from koordfw_colocation_replay.command import load_profile_arg
    from koordfw_colocation_replay.model import RISK_COLD_START, reclaim_percent

    cfg = load_profile_arg(value)["pluginConfig"]
    assert cfg["batch_resource"] == {"enable": True, "riskBudget": {"cpu": eps, "memory": eps}}
    assert cfg["mid_resource"]["riskBudget"] == {"cpu": eps, "memory": eps}
    assert cfg["prediction"] == {"coldStartDuration": RISK_COLD_START}
    assert cfg["resource_profile"]["cpuPercentile"] == 95  # requests bound usage: the budget holds
    # no reclaim threshold: the batch sample is drawn for the suppress threshold, the most BE may use
    assert reclaim_percent({"pluginConfig": cfg}) == 70


@pytest.mark.parametrize("value, message", [
    ("risk:lots", "expected risk:ε"), ("risk:0", "must be in (0, 1)"), ("risk:150%", "must be in (0, 1)"),
])
def test_bad_risk_profile_names_the_flag(value: str, message: str) -> None:
    from koordfw_colocation_replay.command import load_profile_arg

    from koordfw import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        load_profile_arg(value)
    assert str(e.value).startswith(f"--profile: {value}")


def test_risk_mode_sells_from_the_predicted_distribution(tmp_path: Path) -> None:
    """ε = 1 %: the agents' prediction plugin publishes the LS usage distribution in each NodeMetric, the
    manager sizes batch-cpu and mid-cpu from it; 4 VMs of 2 cores at 25 % (0.5 core each, 2 cores in all, no
    other usage) on one 8-core node: after the 2 h cold start both are the capacity minus the predicted
    2-core peak (its bucket end, at most 5 % above), 6 cores less at most 100m."""
    from koordfw_colocation_replay.command import load_profile_arg

    ls = load_ls(write_ls(tmp_path / "ls", [(i, 2, 0.25) for i in range(4)], 36))
    batch = load_batch(write_batch(tmp_path / "batch", [(0, "j1", "M1", 1, 60, 50, 0.4)]))
    r = Replay(ls, batch, mode="koordfw", nodes=1, node_cpu=8.0, node_memory=64 * GiB, slots=ls.slots,
               batch_fraction=1.0, seed=1, profile=load_profile_arg("risk:1%"))
    res = anyio.run(r.run)
    status = r.engine.view.node_metric("node-000")["status"]
    assert status["prodReclaimableMetric"]["resource"]["resources"]
    assert [c["model"] for c in status["koordfwProdUsageDistribution"]["components"]] == ["sys", "koord-prod", ""]
    alloc = r.engine.view.node("node-000").allocatable
    for name in ("kubernetes.io/batch-cpu", "kubernetes.io/mid-cpu"):
        assert 8000 - 2000 - 100 <= alloc[name] <= 8000 - 2000, (name, alloc)
    assert res.summary["prediction_errors"] == 0 and res.summary["ls_starved_slots"] == 0


class RecordingPool(Replay):
    """Keeps every executor pod it creates (as admitted) and the QoS its node state gave it."""

    made: list

    async def _create(self, sh: int, lanes: int, cpu: float, mem: int, now: float):  # type: ignore[no-untyped-def]
        e = await super()._create(sh, lanes, cpu, mem, now)
        self.made = [*getattr(self, "made", []), self.engine.view.pod(e.uid)]
        return e


def mid_run(tmp_path: Path, profile: str, slots: int = 36) -> tuple[RecordingPool, object]:
    """Every job Mid (``mid_share`` 1): 4 VMs of 2 cores at 25 % on one 8-core node, one task of 4 instances
    (0.5 core planned, 0.4 used) for 10 minutes arriving every hour."""
    from koordfw_colocation_replay.command import load_profile_arg

    ls = load_ls(write_ls(tmp_path / "ls", [(i, 2, 0.25) for i in range(4)], slots))
    batch = load_batch(write_batch(tmp_path / "batch", [(0, "j1", "M1", 4, 600, 50, 0.4)]))
    r = RecordingPool(ls, batch, mode="koordfw", nodes=1, node_cpu=8.0, node_memory=64 * GiB, slots=ls.slots,
                      batch_fraction=1.0, seed=1, profile=load_profile_arg(profile), mid_share=1.0)
    return r, anyio.run(r.run)


def test_mid_executors_run_on_mid_resources_as_ls_pods(tmp_path: Path) -> None:
    """With the risk profile's 2 h cold start, mid-cpu appears after two hours: the Mid executors then bind
    (koord-mid, their requests renamed to mid-cpu / mid-memory by the colocation profile), run as LS pods
    (never suppressed, never evicted) and their CPU is Mid's, not batch's."""
    r, res = mid_run(tmp_path, "risk:1%")
    assert r.mid_jobs_taken == 3 and all(r.shape_mid)
    assert r.made
    for pod in r.made:
        assert pod.priority_class_with_default == "koord-mid" and pod.labels["koordinator.sh/qosClass"] == "LS"
        assert "kubernetes.io/mid-cpu" in pod.requests and "cpu" not in pod.requests
    s = res.summary
    assert s["mid_executor_pods_bound"] >= 1 and s["mid_cpu_hours"] > 0
    assert s["batch_cpu_hours"] == 0 and s["evictions"] == 0


def test_mid_waits_for_the_predictor_under_koordinators_cold_start(tmp_path: Path) -> None:
    """Koordinator's 24 h cold start: every LS pod is younger, the predictor reports nothing reclaimable, so
    there is no mid-cpu and no Mid executor binds in the first 3 hours (the pool's requests are withdrawn)."""
    r, res = mid_run(tmp_path, "koordinator")
    alloc = r.engine.view.node("node-000").allocatable
    assert alloc.get("kubernetes.io/mid-cpu", 0) == 0
    assert res.summary["mid_executor_pods_bound"] == 0 and res.summary["mid_cpu_hours"] == 0


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan"])
def test_bad_mid_share_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture, value: str) -> None:
    d = write_ls(tmp_path / "ls", [(1, 2, 0.5)], 3)
    b = write_batch(tmp_path / "b", [(0, "j_1", "M1", 1, 10, 100, 50)])
    assert main(["replay", "colocation", "--ls-trace", str(d), "--batch-trace", str(b), "--mid-share", value]) == 2
    assert "--mid-share: must be in [0, 1]" in capsys.readouterr().err
