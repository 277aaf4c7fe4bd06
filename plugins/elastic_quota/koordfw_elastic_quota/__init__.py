"""koordfw_elastic_quota: Koordinator elastic quotas for koordfw (see ``docs/plugins/elastic_quota.md``)."""

from .plugin import Args, ElasticQuota
from .quotas import DEFAULT, ROOT, SYSTEM, QuotaTree, build_quotas, parse_quota
from .quotas import ElasticQuota as Quota
from .runtime import Child, hamilton, redistribute, scale_mins

__all__ = ["DEFAULT", "ROOT", "SYSTEM", "Args", "Child", "ElasticQuota", "Quota", "QuotaTree", "build_quotas",
           "hamilton", "parse_quota", "redistribute", "scale_mins"]
