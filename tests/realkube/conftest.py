"""Tests against a real control plane (kube-apiserver, etcd, kube-controller-manager v1.20.2, and
kube-scheduler where a test starts it): ``kube_plane`` from ``koordfw.testing``'s pytest plugin. The
binaries come from ``$KUBEBUILDER_ASSETS`` or ``scripts/kube-binaries.sh`` (``make test`` sets the
first). Shared helpers are in realkube_testkit.py."""
