#!/usr/bin/env bash
# Print the folder that holds a real Kubernetes control plane for koordfw's tests: kube-apiserver,
# kube-controller-manager, kube-scheduler and etcd (controller-runtime envtest's layout, so
# $KUBEBUILDER_ASSETS may name any release's binaries a user downloaded).
#
# Where the binaries come from, first that works:
#   1. $KUBEBUILDER_ASSETS, when set (used as it is; etcd may also come from PATH);
#   2. the cache folder ${KOORDFW_KUBE_CACHE:-$HOME/.cache/koordfw-kube}/v1.20.2, when already filled;
#   3. ../shared/kubernetes/v1.20.2/*.xz next to the checkout (the binaries built as 4. does), unpacked
#      into the cache and checked against its SHA256SUMS;
#   4. built from Debian's `kubernetes` source package (v1.20.2 with its vendor tree) with Debian
#      bullseye's Go 1.15 (Go 1.18+ crashes this release's vendored reflect2), into the cache:
#      20-30 minutes once per machine.
# etcd is Debian's `etcd-server` (installed with apt-get when missing and we are root).
#
# Usage: scripts/kube-binaries.sh          prints the folder on stdout (progress goes to stderr)
set -euo pipefail

VERSION=v1.20.2
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SHARED="${KOORDFW_SHARED:-$ROOT/../shared}/kubernetes/$VERSION"
CACHE="${KOORDFW_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/koordfw-kube}/$VERSION"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler)

say() { echo "kube-binaries: $*" >&2; }

apt_install() {
    if [ "$(id -u)" != 0 ]; then
        say "missing $*: install it (apt-get install $*) or run as root"; exit 1
    fi
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2 || {
        apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2; }
}

ensure_etcd() {  # $1: the folder that must end up with an etcd
    local dir="$1"
    [ -x "$dir/etcd" ] && return 0
    if ! command -v etcd >/dev/null 2>&1; then
        apt_install etcd-server
    fi
    # Debian's etcd-server starts a system etcd on 2379 where systemd runs; the tests use their own
    # ports, so it does not matter, but it is not needed either
    ln -sf "$(command -v etcd)" "$dir/etcd"
}

complete() { for b in "${BINARIES[@]}"; do [ -x "$1/$b" ] || return 1; done; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
    complete "$KUBEBUILDER_ASSETS" || { say "\$KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks one of ${BINARIES[*]}"; exit 1; }
    [ -x "$KUBEBUILDER_ASSETS/etcd" ] || command -v etcd >/dev/null 2>&1 || apt_install etcd-server
    echo "$KUBEBUILDER_ASSETS"
    exit 0
fi

mkdir -p "$CACHE"
if ! complete "$CACHE"; then
    if [ -f "$SHARED/SHA256SUMS" ]; then
        say "unpacking $SHARED into $CACHE"
        for b in "${BINARIES[@]}"; do
            xz -dc "$SHARED/$b.xz" > "$CACHE/$b.tmp"
            chmod +x "$CACHE/$b.tmp"
        done
        (cd "$CACHE" && sed 's/  \(kube-[a-z-]*\)$/  \1.tmp/' "$SHARED/SHA256SUMS" | sha256sum -c --quiet - >&2)
        for b in "${BINARIES[@]}"; do mv "$CACHE/$b.tmp" "$CACHE/$b"; done
    else
        say "no prebuilt binaries; building Kubernetes $VERSION from Debian's source package (20-30 min)"
        BUILD="$(mktemp -d)"
        trap 'rm -rf "$BUILD"' EXIT
        if [ ! -x /usr/lib/go-1.15/bin/go ]; then
            if ! grep -rqs bullseye /etc/apt/sources.list /etc/apt/sources.list.d/; then
                echo "deb http://deb.debian.org/debian bullseye main" > /etc/apt/sources.list.d/koordfw-bullseye.list
                printf 'Package: *\nPin: release n=bullseye\nPin-Priority: 100\n' > /etc/apt/preferences.d/koordfw-bullseye
            fi
            if ! grep -rqs '^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
                echo "deb-src http://deb.debian.org/debian bookworm main" > /etc/apt/sources.list.d/koordfw-src.list
            fi
            apt-get update -q >&2
            apt_install rsync dpkg-dev
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t bullseye golang-1.15-go >&2
        fi
        (cd "$BUILD" && apt-get source --download-only kubernetes >&2 && tar xzf kubernetes_*.orig.tar.gz)
        mkdir -p "$BUILD/gopath/src/k8s.io"
        ln -s "$(ls -d "$BUILD"/kubernetes-*/ | head -1)" "$BUILD/gopath/src/k8s.io/kubernetes"
        (cd "$BUILD/gopath/src/k8s.io/kubernetes" &&
         PATH=/usr/lib/go-1.15/bin:$PATH GOPATH="$BUILD/gopath" KUBE_GIT_VERSION=$VERSION KUBE_GIT_TREE_STATE=clean \
         KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56 GOFLAGS= CGO_ENABLED=0 \
         make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >&2)
        for b in "${BINARIES[@]}"; do
            install -m 0755 "$BUILD/gopath/src/k8s.io/kubernetes/_output/local/bin/linux/amd64/$b" "$CACHE/$b"
            strip "$CACHE/$b" 2>/dev/null || true
        done
    fi
fi
ensure_etcd "$CACHE"
echo "$CACHE"
