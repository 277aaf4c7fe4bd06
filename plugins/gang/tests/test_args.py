"""Plugin args: Koordinator's CoschedulingArgs names, defaults and clear errors."""

import pytest
from gang_testkit import cluster, gang_pods

from koordfw import ConfigError, build_registry
from koordfw.testing import schedule


def test_defaults():
    args = build_registry(autoload=True, only={"gang"}).args["gang"]
    assert (args.default_timeout, args.default_match_policy, args.timeout_seconds) == ("600s", "once-satisfied", 600.0)
    # Koordinator's CoschedulingArgs.EnablePreemption defaults to false; evictWholeStrictGangs is koordfw's
    assert (args.enable_preemption, args.evict_whole_strict_gangs) == (False, False)


def test_preemption_args_by_their_wire_names():
    args = build_registry({"pluginConfig": {"gang": {"enablePreemption": True, "evictWholeStrictGangs": True}}},
                          autoload=True, only={"gang"}).args["gang"]
    assert (args.enable_preemption, args.evict_whole_strict_gangs) == (True, True)


@pytest.mark.parametrize("cfg,field", [({"defaultTimeout": "soon"}, "defaultTimeout"),
                                       ({"defaultTimeout": "0s"}, "defaultTimeout"),
                                       ({"defaultMatchPolicy": "eventually"}, "defaultMatchPolicy"),
                                       ({"timeout": "1s"}, "timeout"),
                                       ({"enablePreemption": "maybe"}, "enablePreemption")])
def test_bad_args_name_the_field(cfg, field):
    with pytest.raises(ConfigError, match=field):
        build_registry({"pluginConfig": {"gang": cfg}}, autoload=True, only={"gang"})


def test_default_timeout_applies_to_gangs_without_waiting_time():
    members = gang_pods("job", 2)
    members[1]["spec"]["nodeSelector"] = {"zone": "nowhere"}
    members[0]["metadata"]["annotations"]["gang.scheduling.koordinator.sh/mode"] = "NonStrict"
    members[1]["metadata"]["annotations"]["gang.scheduling.koordinator.sh/mode"] = "NonStrict"
    r = schedule(cluster(1, "4", *members), only=["gang"], profile={"pluginConfig": {"gang": {"defaultTimeout": "90s"}}})
    d = {p["name"]: p for p in r.to_dict()["pods"]}
    assert d["job-0"]["reason"] == "rejected due to timeout after waiting 90s at plugin gang"
