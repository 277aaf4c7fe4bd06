"""API discovery, as client-go's: which version of a group the cluster serves, asked of the cluster.

Kubernetes moved ``PodDisruptionBudget`` and the ``Eviction`` subresource from ``policy/v1beta1`` to
``policy/v1`` (PodDisruptionBudget in 1.21, Eviction in 1.22; ``policy/v1beta1``'s PDB is gone since 1.25).
A client that hard-codes one version sees no PDB, or has every eviction refused, on the other releases.
So koordfw asks:

* **a group's versions**: ``GET /apis/<group>`` (the ``APIGroup`` document); :meth:`Discovery.version`
  picks the first of the versions koordfw speaks (:data:`KNOWN_VERSIONS`, newest first) that the server
  serves. ``PodDisruptionBudget`` is watched at ``/apis/policy/<that version>/poddisruptionbudgets``
  (:class:`VersionedReflector`).
* **the Eviction body's version**: the group version the ``pods/eviction`` subresource advertises in
  ``GET /api/v1`` (its ``group``/``version``, as kubectl drain's ``CheckEvictionSupport``): ``policy/v1beta1``
  on 1.20 and 1.21 (which serve PDB in ``policy/v1`` but no ``policy/v1`` Eviction), ``policy/v1`` from 1.22
  (which accepts v1beta1 bodies too). A server that does not say falls back to the policy group's version.

Answers are cached per :class:`KubeClient` (:func:`discovery_for`); a 404 (or a 400 refusing the Eviction
body's version) forgets the cached answer and asks again, so a cluster upgraded under a running component is
followed. A failed discovery request (no answer, 5xx) is not cached.
"""

from __future__ import annotations

from typing import Any

import structlog

from .client import ApiError, KubeClient
from .reflector import Handler, Reflector

log = structlog.get_logger("koordfw.kube")

#: the versions koordfw speaks of each group whose version it picks by discovery, newest first
KNOWN_VERSIONS: dict[str, tuple[str, ...]] = {"policy": ("v1", "v1beta1")}
#: the Eviction version when discovery cannot say (a server that answers nothing useful)
DEFAULT_EVICTION_VERSION = "policy/v1"

def discovery_for(client: KubeClient) -> Discovery:
    """The discovery cache of ``client`` (one per client, made on first use and kept on the client)."""
    d = client.discovery
    if not isinstance(d, Discovery):
        d = client.discovery = Discovery(client)
    return d


class Discovery:
    """What ``client``'s server serves, asked once and cached (see the module docstring)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        #: group → the versions served (empty: the group is not served)
        self._groups: dict[str, tuple[str, ...]] = {}
        self._eviction: str | None = None
        #: discovery requests made (for tests: the cache keeps this low)
        self.requests = 0

    def invalidate(self, group: str | None = None) -> None:
        """Forget the cached answers about ``group`` (None: every answer)."""
        if group is None:
            self._groups.clear()
            self._eviction = None
            return
        self._groups.pop(group, None)
        if group == "policy":
            self._eviction = None

    async def served_versions(self, group: str, *, refresh: bool = False) -> tuple[str, ...]:
        """The versions of ``group`` the server serves, in its order (the preferred first); () when it serves
        none (404). Raises :class:`ApiError` when the server does not answer (not cached)."""
        if not refresh and group in self._groups:
            return self._groups[group]
        self.requests += 1
        try:
            doc = await self.client.request("GET", f"/apis/{group}")
        except ApiError as e:
            if e.status != 404:
                raise
            doc = {}
        versions = _versions(doc)
        if versions != self._groups.get(group):
            log.info("discovered API versions", group=group, versions=list(versions))
        self._groups[group] = versions
        return versions

    async def version(self, group: str, *, refresh: bool = False) -> str | None:
        """The newest of :data:`KNOWN_VERSIONS` of ``group`` that the server serves (any group koordfw does
        not list: the server's preferred version), or None."""
        served = await self.served_versions(group, refresh=refresh)
        known = KNOWN_VERSIONS.get(group)
        if known is None:
            return served[0] if served else None
        return next((v for v in known if v in served), None)

    async def eviction_version(self, *, refresh: bool = False) -> str:
        """``apiVersion`` of the Eviction bodies this server takes (``policy/v1`` or ``policy/v1beta1``)."""
        if self._eviction is not None and not refresh:
            return self._eviction
        self.requests += 1
        try:
            core = await self.client.request("GET", "/api/v1")
        except ApiError as e:
            if e.status == 0 or e.status >= 500:
                log.warning("API discovery failed; assuming the newest Eviction version", error=str(e),
                            version=DEFAULT_EVICTION_VERSION)
                return DEFAULT_EVICTION_VERSION
            core = {}
        gv = _eviction_group_version(core)
        if gv is None:
            try:
                v = await self.version("policy", refresh=refresh)
            except ApiError as e:
                log.warning("API discovery failed; assuming the newest Eviction version", error=str(e),
                            version=DEFAULT_EVICTION_VERSION)
                return DEFAULT_EVICTION_VERSION
            gv = f"policy/{v}" if v else DEFAULT_EVICTION_VERSION
        if gv != self._eviction:
            log.info("discovered the Eviction version", version=gv)
        self._eviction = gv
        return gv


def _versions(doc: Any) -> tuple[str, ...]:
    if not isinstance(doc, dict):
        return ()
    out = [v.get("version") for v in doc.get("versions") or () if isinstance(v, dict)]
    served = [v for v in out if isinstance(v, str) and v]
    pref = (doc.get("preferredVersion") or {}).get("version") if isinstance(doc.get("preferredVersion"), dict) else None
    if pref in served:
        served.remove(pref)
        served.insert(0, pref)
    return tuple(served)


def _eviction_group_version(core: Any) -> str | None:
    """``pods/eviction``'s ``group/version`` in the ``/api/v1`` resource list, if it says."""
    if not isinstance(core, dict):
        return None
    for r in core.get("resources") or ():
        if isinstance(r, dict) and r.get("name") == "pods/eviction":
            group, version = r.get("group"), r.get("version")
            if isinstance(group, str) and group and isinstance(version, str) and version:
                return f"{group}/{version}"
            return None
    return None


def version_refused(err: ApiError) -> bool:
    """Whether ``err`` may mean the version asked for is not (or no longer) served: a 404 that names no
    object, or the 400 an apiserver gives an Eviction body in a version it has no Eviction kind of
    (``no kind "Eviction" is registered for version "policy/v1"``)."""
    if err.status == 404:
        details = (err.body or {}).get("details") if isinstance(err.body, dict) else None
        return not (isinstance(details, dict) and details.get("name"))
    return err.status == 400 and "is registered for version" in err.message


class VersionedReflector(Reflector):
    """A :class:`Reflector` over ``/apis/<group>/{version}/<plural>``: the version is the one discovery picks
    (:meth:`Discovery.version`), asked before every LIST; a 404 forgets the cached answer, so the next probe
    asks again. A group serving no version koordfw knows is absent (as a 404)."""

    def __init__(self, client: KubeClient, template: str, handler: Handler, **kw: Any) -> None:
        parts = template.split("/")
        if len(parts) < 5 or parts[1] != "apis" or parts[3] != "{version}":
            raise ValueError(f"expected /apis/<group>/{{version}}/..., got {template!r}")
        super().__init__(client, template, handler, **kw)
        self.template, self.group = template, parts[2]
        #: the version being watched ("" until discovered)
        self.version = ""

    async def _list(self) -> None:
        disc = discovery_for(self.client)
        version = await disc.version(self.group)
        if version is None:
            raise ApiError(404, f"the server serves no version of {self.group} koordfw knows "
                                f"({', '.join(KNOWN_VERSIONS.get(self.group, ())) or 'any'})")
        if version != self.version:
            self.version, self.path = version, self.template.format(version=version)
            self.resource_version = ""  # another version's resourceVersions are not this one's
        try:
            await super()._list()
        except ApiError as e:
            if e.status == 404:
                disc.invalidate(self.group)
            raise

    async def _watch(self) -> None:
        try:
            await super()._watch()
        except ApiError as e:
            if e.status == 404:
                discovery_for(self.client).invalidate(self.group)
            raise
