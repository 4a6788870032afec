#!/usr/bin/env bash
# A Kubernetes test cluster of KUBE_NODES nodes (default 2; 1 for a single
# node) on one machine that CI can start, for the kubernetes runtime
# backend's tests (issue 27). Nothing is installed on the host and no
# registry is needed (KUBE_REGISTRY names one the nodes may pull from):
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
#     kubectl are built from the Go module proxy at KUBE_VERSION (the module in
#     hack/kube/), once: the binaries are cached under $KUBE_CACHE;
#   - etcd, the CNI plugins and a static busybox come from Debian packages,
#     unpacked with dpkg-deb -x into the same cache;
#   - each node runs a containerd of its own whose CRI runtime handler `gvisor`
#     (also the default one, so no pod runs without gVisor) is containerd's
#     runc v2 shim with BinaryName = a wrapper around the pinned runsc
#     (hack/install-runsc.sh). gVisor's own shim needs CAP_SYS_RESOURCE, which
#     these VMs lack, and speaks a bootstrap format containerd 1.6 cannot read;
#   - NetworkPolicies are objects only: nothing enforces them. The SIG's
#     enforcer, sigs.k8s.io/kube-network-policies, sends packets to user space
#     with nftables' `queue` expression, which needs a kernel with
#     CONFIG_NFT_QUEUE; these VMs' kernel has it unset and loads no modules
#     (`nft add rule ... queue to 100` fails: No such file or directory). The
#     egress tests say so when a pod's direct connection is not blocked;
#   - images are small OCI archives imported into each node's containerd
#     (pause, and busybox as skillbox.local/kube/busybox:1), and skillbox's
#     interpreter images (skillbox images export of SKILLBOX_IMAGES, as
#     skillbox.local/NAME@sha256:...); pods use imagePullPolicy: Never.
#
# Every node lives in a private network + mount namespace of its own, held
# by one process the script starts ($KUBE_DIR/pids/holder, holder-N). Node
# 1's also runs the control plane: its address sits on a veth whose other
# end is the host's (so the host reaches the API server). With more nodes,
# node 1's namespace holds a bridge, the nodes' link, which node N joins
# with a veth at its own address; each namespace routes the other nodes'
# pod subnets over it, without masquerade, so every pod IP is reached from
# node 1's namespace (KUBE_NETNS of env) and from every pod. Pods sit on a
# CNI bridge per node; no namespace has a default route, and none routes
# from the pods to anything but the pods and the nodes' addresses (not the
# host's end of the veth, no address outside). tmpfs hides the host's
# /run, /var/lib and /var/log in each namespace (containerd 1.6 hard-codes
# /run/containerd/...), and the kernel settings the kubelet insists on are
# faked there, so the host's are never changed.
#
#   hack/kube.sh up      build (once) and start the cluster, wait until every
#                        node is Ready, import the interpreter images into
#                        every node; idempotent
#   hack/kube.sh env     print KUBECONFIG=... and KUBECTL=... of the cluster,
#                        and, while it is up, KUBE_NODES=NAME,... and per
#                        node N KUBE_NODE_N (its name), KUBE_NODE_N_IP,
#                        KUBE_NODE_N_POD_CIDR, KUBE_NODE_N_NETNS (nsenter
#                        --net=FILE enters it) and KUBE_NODE_N_CONTAINERD
#                        (its socket); KUBE_NETNS is node 1's namespace
#   hack/kube.sh down    stop what up started, remove its interfaces and
#                        namespaces; the logs stay in $KUBE_DIR/logs
#   hack/kube.sh import FILE|-
#                        import an OCI image archive (FILE, or stdin) into
#                        every node's containerd (namespace k8s.io, where the
#                        kubelet finds images), under the names its index
#                        gives (runtime/kubernetes.WriteImageArchive and
#                        skillbox images export write such archives)
#   hack/kube.sh node-down NAME
#                        kill node NAME's kubelet, containerd, shims and
#                        sandboxes (SIGKILL, as a lost machine), for
#                        node-loss tests; the control plane keeps running
#   hack/kube.sh node-up NAME
#                        start node NAME's containerd and kubelet again, and
#                        wait until it is Ready
#   hack/kube.sh etcd-bin
#                        fetch (once) and print the path of the etcd server
#                        binary, for tests of the shared state store
#   hack/kube.sh build   build and fetch (once) what up needs, under the
#                        cache's lock (make test runs it in the background;
#                        an up meanwhile waits for it)
#
# Nodes: node 1 is skillbox-kube at 10.213.0.2 with pods on 10.214.0.0/24,
# node N is skillbox-kube-N at 10.213.1.N with pods on 10.214.(N-1).0/24 (for
# KUBE_NET=10.213); each has its own containerd socket, state, CNI subnet,
# cgroup root and files ($KUBE_DIR for node 1, $KUBE_DIR/nodeN).
#
# Environment: KUBE_DIR (the cluster, default /var/tmp/skillbox-kube; not
# under /run, /var/lib or /var/log), KUBE_NODES (1 to 9, default 2; read by
# up), KUBE_CACHE (default /var/cache/skillbox/kube/$KUBE_VERSION),
# KUBE_BUILD_P (parallel build jobs, default the number of CPUs), KUBE_NET
# (the first two octets of the ranges used, default 10.213: host link
# 10.213.0.0/30, nodes' link 10.213.1.0/24, pods 10.214.0.0/16, services
# 10.215.0.0/24 for KUBE_NET=10.213), SKILLBOX_IMAGES (the image store up
# imports interpreter images from, default /var/lib/skillbox/images),
# SKILLBOX_BIN (the skillbox binary that exports them, default bin/skillbox
# of this tree, else skillbox on PATH), KUBE_IMAGES (the names of those
# images to import, default every built one; "none": none),
# KUBE_RUNSC_DEBUG=1 (runsc debug logs of every pod in
# $KUBE_DIR/logs/runsc/), KUBE_REGISTRY (HOST:PORT of a plain-HTTP registry
# the nodes' containerd pulls from, e.g. one a test serves on each node's
# loopback for the kubernetes runtime's registry option; read by up).
#
# Needs root.
set -euo pipefail

KUBE_VERSION=v1.34.4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=$(realpath -m "${KUBE_DIR:-/var/tmp/skillbox-kube}")
cache=$(realpath -m "${KUBE_CACHE:-/var/cache/skillbox/kube/$KUBE_VERSION}")
net=${KUBE_NET:-10.213}
a=${net%%.*}
b=${net#*.}
node_ip=$a.$b.0.2 # node 1's, where the API server listens
host_ip=$a.$b.0.1
pod_net=$a.$((b + 1)).0.0/16 # node N's pods: $a.$((b + 1)).(N-1).0/24
link_net=$a.$b.1.0/24        # the nodes' link: node 1 .1, node N .N
svc_cidr=$a.$((b + 2)).0.0/24
svc_ip=$a.$((b + 2)).0.1
node_name=skillbox-kube
host_if=skbk-$a-$b # one per KUBE_NET: two clusters need two KUBE_NETs
# The kubelet's cgroups (its pods under $cgroup_root/kubepods) are one per
# KUBE_NET and node too: the namespaces share the host's cgroup hierarchy,
# and a kubelet removes the pod cgroups it does not know under its root.
cgroup_root=/skillbox-kube-$a-$b
node_if=skbk-node
bridge_if=skbk-br0
link_bridge=skbk-nodes # in node 1's namespace; node N's veth skbk-nN <-> skbk-link
pause_image=skillbox.local/kube/pause:1
busybox_image=skillbox.local/kube/busybox:1
nodes=${KUBE_NODES:-2}

bin=$cache/bin
logs=$dir/logs
pids=$dir/pids
pki=$dir/pki
sock=$dir/containerd/containerd.sock
kubectl_() { "$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" --cache-dir "$dir/kubectl-cache" "$@"; }

step() { printf 'kube.sh: %s\n' "$*" >&2; }
die() {
  printf 'kube.sh: %s\n' "$*" >&2
  exit 1
}

usage() {
  echo "usage: $0 up|down|env|import FILE|-|node-down NAME|node-up NAME|etcd-bin|build" >&2
  exit 2
}

# node I sets the n_* variables of node I (1 is the one with the control
# plane; its files keep the single-node cluster's paths).
node() {
  n_i=$1
  if ((n_i == 1)); then
    n_name=$node_name n_sfx= n_dir=$dir n_ip=$node_ip n_link_ip=$a.$b.1.1 n_cgroup=$cgroup_root
  else
    n_name=$node_name-$n_i n_sfx=-$n_i n_dir=$dir/node$n_i n_ip=$a.$b.1.$n_i n_link_ip=$a.$b.1.$n_i n_cgroup=$cgroup_root-$n_i
  fi
  n_pod_cidr=$a.$((b + 1)).$((n_i - 1)).0/24
  n_sock=$n_dir/containerd/containerd.sock
}

# node_indexes: the nodes whose namespaces exist (those of the last up,
# whatever KUBE_NODES says now).
node_indexes() {
  local f i
  for f in "$pids"/holder "$pids"/holder-*; do
    [[ -f $f ]] || continue
    i=${f##*/holder}
    echo "${i#-}"
  done | sed 's/^$/1/' | sort -n
}

# node_index NAME: the index of the node named NAME.
node_index() {
  local i
  for i in $(node_indexes); do
    node "$i"
    if [[ $n_name == "$1" ]]; then
      echo "$i"
      return
    fi
  done
  die "no node named $1 (nodes: $(for i in $(node_indexes); do node "$i"; printf '%s ' "$n_name"; done))"
}

# holder_pid [I]: the process holding node I's namespaces (default 1):
# alive (not a zombie), and in network and mount namespaces other than
# this script's. Anything else is no holder: down and node-down kill the
# processes of a holder's mount namespace, which must never be the host's.
holder_pid() {
  local p f=$pids/holder net mnt
  [[ ${1:-1} == 1 ]] || f=$pids/holder-$1
  [[ -f $f ]] || return 1
  p=$(cat "$f")
  [[ $p =~ ^[0-9]+$ ]] || return 1
  kill -0 "$p" 2>/dev/null || return 1
  # The holder is unshare's "sleep infinity": a reused pid is not.
  [[ $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) == "sleep infinity " ]] || return 1
  net=$(readlink "/proc/$p/ns/net" 2>/dev/null) || return 1
  mnt=$(readlink "/proc/$p/ns/mnt" 2>/dev/null) || return 1
  [[ -n $net && -n $mnt && $net != "$(readlink /proc/self/ns/net)" && $mnt != "$(readlink /proc/self/ns/mnt)" ]] || return 1
  echo "$p"
}

# ---- build and fetch (cached) ----------------------------------------------

# build_cache builds or fetches everything a cluster runs from, once per
# cache, under a lock: `build` may run in the background (make test starts
# it beside the image builds) while a test's `up` waits for it.
build_cache() {
  lock_cache
  build_kube
  fetch_debs
  build_pause
  build_images
  exec 9>&- # the cluster's processes must not inherit the lock
}

# lock_cache takes the cache's lock (fd 9).
lock_cache() {
  install -d "$cache"
  exec 9>"$cache/.build.lock"
  flock 9
}

build_kube() {
  local stamp=$cache/bin/.built want
  want=$(cat "$here/kube/go.mod" "$here/kube/go.sum" | sha256sum | cut -d' ' -f1)
  if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
    step "kubernetes $KUBE_VERSION: cached in $bin"
    return
  fi
  local go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
  [[ -x $go ]] || die "Go is required to build Kubernetes $KUBE_VERSION (https://go.dev/doc/install)"
  step "kubernetes $KUBE_VERSION: building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl (about 12 min on 2 cores the first time; log $cache/build.log)"
  local start=$SECONDS tmp v=k8s.io/component-base/version
  install -d "$cache"
  tmp=$(mktemp -d "$cache/bin.XXXXXX")
  if ! (cd "$here/kube" && nice -n 19 env CGO_ENABLED=0 GOFLAGS=-mod=readonly "$go" build \
    -p "${KUBE_BUILD_P:-$(nproc)}" -trimpath \
    -ldflags "-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$(cut -d. -f2 <<<"$KUBE_VERSION") -X $v.gitTreeState=clean" \
    -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl) \
    >"$cache/build.log" 2>&1; then
    rm -rf "$tmp"
    tail -n 30 "$cache/build.log" >&2
    die "building Kubernetes $KUBE_VERSION failed (log above, $cache/build.log)"
  fi
  rm -rf "$bin"
  mv "$tmp" "$bin"
  echo "$want" >"$stamp"
  step "kubernetes $KUBE_VERSION: built in $((SECONDS - start)) s"
}

# Debian packages unpacked, not installed: no service starts, nothing on PATH.
fetch_debs() {
  local root=$cache/debian
  if [[ -f $root/.fetched ]]; then
    return
  fi
  step "debian: fetching etcd-server, containernetworking-plugins, busybox-static into $root"
  local tmp
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download etcd-server containernetworking-plugins busybox-static) >"$cache/apt.log" 2>&1; then
    rm -rf "$tmp"
    tail -n 20 "$cache/apt.log" >&2
    die "apt-get download failed (log above); run apt-get update"
  fi
  rm -rf "$root"
  install -d "$root"
  for deb in "$tmp"/*.deb; do
    dpkg-deb -x "$deb" "$root"
    dpkg-deb -f "$deb" Package Version | paste -sd' ' >>"$root/VERSIONS"
  done
  rm -rf "$tmp"
  touch "$root/.fetched"
}

# The sandbox image's pause, built from the pinned Kubernetes source.
build_pause() {
  [[ -x $cache/pause/pause ]] && return
  step "pause: compiling build/pause/linux/pause.c of k8s.io/kubernetes $KUBE_VERSION"
  local src
  src=$(cd "$here/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
  install -d "$cache/pause"
  gcc -Os -static -DVERSION="$KUBE_VERSION-skillbox" -o "$cache/pause/pause.tmp" "$src/build/pause/linux/pause.c" ||
    die "compiling pause failed: gcc and a static libc (libc6-dev) are needed"
  mv "$cache/pause/pause.tmp" "$cache/pause/pause"
}

# oci_archive NAME ROOTFS OUT ENTRYPOINT-JSON: a one-layer OCI image archive
# that `ctr images import` takes.
oci_archive() {
  local name=$1 rootfs=$2 out=$3 entry=$4 work
  work=$(mktemp -d)
  install -d "$work/blobs/sha256"
  tar -C "$rootfs" --owner=0 --group=0 --numeric-owner --sort=name --mtime=@0 -cf "$work/layer.tar" .
  blob() { # blob FILE: move into blobs, print "digest size"
    local d s
    d=$(sha256sum "$1" | cut -d' ' -f1)
    s=$(stat -c %s "$1")
    mv "$1" "$work/blobs/sha256/$d"
    echo "sha256:$d $s"
  }
  local layer config manifest
  layer=$(blob "$work/layer.tar")
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
    "$entry" "${layer% *}" >"$work/config.json"
  config=$(blob "$work/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
    "${config% *}" "${config#* }" "${layer% *}" "${layer#* }" >"$work/manifest.json"
  manifest=$(blob "$work/manifest.json")
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "${manifest% *}" "${manifest#* }" "$name" "${name##*:}" >"$work/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci-layout"
  tar -C "$work" -cf "$out" oci-layout index.json blobs
  rm -rf "$work"
}

build_images() {
  [[ -f $cache/images/pause.tar && -f $cache/images/busybox.tar ]] && return
  step "images: $pause_image and $busybox_image as OCI archives"
  local r
  install -d "$cache/images"
  r=$(mktemp -d)
  install -D -m 0755 "$cache/pause/pause" "$r/pause"
  oci_archive "$pause_image" "$r" "$cache/images/pause.tar" '["/pause"]'
  rm -rf "$r"
  r=$(mktemp -d)
  install -d "$r/bin" "$r/tmp"
  install -m 0755 "$cache/debian/bin/busybox" "$r/bin/busybox"
  for c in sh cat ls sleep echo dmesg nc id env true false; do ln -s busybox "$r/bin/$c"; done
  oci_archive "$busybox_image" "$r" "$cache/images/busybox.tar" '["/bin/sh"]'
  rm -rf "$r"
}

# ---- the cluster's files -----------------------------------------------------

# cert NAME CN O EXT: a key and a certificate signed by the cluster's CA.
cert() {
  local name=$1 cn=$2 o=$3 ext=$4 subj="/CN=$2"
  [[ -n $o ]] && subj="/O=$o/CN=$cn"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/$name.key" \
    -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 30 -extfile <(printf '%s\n' "$ext") -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr"
}

kubeconfig() { # kubeconfig FILE CERT-NAME
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: skillbox-kube
  cluster:
    server: https://$node_ip:6443
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$pki/$2.crt")
    client-key-data: $(base64 -w0 <"$pki/$2.key")
contexts:
- name: skillbox-kube
  context:
    cluster: skillbox-kube
    user: $2
current-context: skillbox-kube
EOF
}

write_pki() {
  step "pki: CA, serving and client certificates in $pki"
  install -d -m 0700 "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj "/CN=skillbox-kube-ca" -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  local client="keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
  cert apiserver kube-apiserver "" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$node_ip,IP:$svc_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin admin system:masters "$client"
  cert apiserver-kubelet kube-apiserver-kubelet-client system:masters "$client"
  cert controller-manager system:kube-controller-manager "" "$client"
  cert scheduler system:kube-scheduler "" "$client"
  local i kubelets=()
  for ((i = 1; i <= nodes; i++)); do
    node "$i"
    cert "kubelet$n_sfx" "system:node:$n_name" system:nodes "$client"
    kubelets+=("kubelet$n_sfx")
  done
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key" 2>/dev/null
  openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  for c in admin controller-manager scheduler "${kubelets[@]}"; do kubeconfig "$dir/$c.kubeconfig" "$c"; done
  chmod 0600 "$dir"/*.kubeconfig
}

# The runtime handler's BinaryName of node I ($n_dir/bin/runsc-cri): runsc,
# with the three fixes the CRI needs when runsc stands in for runc behind
# containerd's runc v2 shim.
write_runsc_wrapper() {
  node "$1"
  local runsc
  runsc=$("$here/install-runsc.sh" --path)
  [[ -x $runsc ]] || die "the pinned runsc is not installed at $runsc: run hack/install-runsc.sh"
  install -d "$n_dir/bin"
  cat >"$n_dir/bin/runsc-cri" <<EOF
#!/bin/bash
# Generated by hack/kube.sh: runsc behind containerd's runc v2 shim.
runsc=$runsc
log=$logs/runsc-cri$n_sfx.log
hostnet=$n_dir/bin/runsc-cri.hostnet
debug=${KUBE_RUNSC_DEBUG:-}
EOF
  cat >>"$n_dir/bin/runsc-cri" <<'EOF'
args=("$@")
cmd= bundle= i=0 words=()
while ((i < ${#args[@]})); do
  a=${args[i]}
  case $a in
  --root | --log | --log-format) i=$((i + 2)); continue ;;
  -*) ;;
  *) if [[ -z $cmd ]]; then cmd=$a; else words+=("$a"); fi ;;
  esac
  i=$((i + 1))
done
for ((i = 0; i < ${#args[@]}; i++)); do
  if [[ ${args[i]} == --bundle || ${args[i]} == -b ]]; then bundle=${args[i+1]}; fi
done
extra=()
if [[ -n $debug ]]; then extra+=(--debug "--debug-log=${log%/*}/runsc/%ID%.%COMMAND%.log"); fi
if [[ $cmd == create && -f $bundle/config.json ]]; then
  # 1. With the CRI's container-type/sandbox-id annotations runsc joins the
  #    pod's pause sandbox as a sub-container, and StartContainer then hangs:
  #    drop them, so that each container is a sandbox of its own.
  type=$(jq -r '.annotations["io.kubernetes.cri.container-type"] // ""' "$bundle/config.json")
  jq 'del(.annotations["io.kubernetes.cri.container-type"], .annotations["io.kubernetes.cri.sandbox-id"])' \
    "$bundle/config.json" >"$bundle/config.json.runsc-cri" && mv "$bundle/config.json.runsc-cri" "$bundle/config.json"
  # 2. The pause sandbox would take the pod interface's address into its own
  #    network stack, leaving the app container only lo: give it the host's
  #    (the pod namespace's) network instead.
  #    runsc reads --network again at start, so every command on that
  #    container gets it (the ids are marked in $hostnet).
  if [[ $type == sandbox ]]; then mkdir -p "$hostnet" && touch "$hostnet/${args[-1]}"; fi
fi
for w in "${words[@]}"; do
  if [[ $w != */* && -e $hostnet/$w ]]; then
    extra+=(--network=host)
    [[ $cmd == delete ]] && rm -f "$hostnet/$w"
    break
  fi
done
if [[ $cmd == kill ]]; then
  # 3. runsc says "sandbox is not running" of an exited sandbox; the shim only
  #    knows runc's "container not running", and without it pods hang in
  #    Terminating.
  out=$("$runsc" "${extra[@]}" "${args[@]}" 2>&1)
  rc=$?
  if ((rc != 0)); then
    echo "$out" >&2
    if grep -qi 'not running' <<<"$out"; then echo "container not running" >&2; fi
  fi
  exit $rc
fi
[[ $cmd == create || $cmd == start || $cmd == delete ]] && echo "$(date -u +%FT%T) $cmd ${args[-1]} ${extra[*]}" >>"$log"
exec "$runsc" "${extra[@]}" "${args[@]}"
EOF
  chmod 0755 "$n_dir/bin/runsc-cri"
}

write_configs() {
  node "$1"
  install -d "$n_dir/containerd" "$n_dir/cni/net.d" "$n_dir/kubelet" "$dir/sysctl"
  local registry_config=""
  if [[ -n ${KUBE_REGISTRY:-} ]]; then
    [[ $KUBE_REGISTRY =~ ^[A-Za-z0-9.-]+:[0-9]+$ ]] || die "KUBE_REGISTRY=$KUBE_REGISTRY is not HOST:PORT"
    registry_config="  [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"$KUBE_REGISTRY\"]
    endpoint = [\"http://$KUBE_REGISTRY\"]"
  fi
  cat >"$n_dir/containerd/config.toml" <<EOF
version = 2
root = "$n_dir/containerd/root"
state = "$n_dir/containerd/state"

[grpc]
  address = "$n_sock"

[ttrpc]
  address = "$n_sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$n_dir/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "gvisor"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gvisor]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gvisor.options]
        BinaryName = "$n_dir/bin/runsc-cri"
$registry_config
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cache/debian/usr/lib/cni"
    conf_dir = "$n_dir/cni/net.d"
    max_conf_num = 1
EOF
  cat >"$n_dir/cni/net.d/10-skillbox-kube.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "skillbox-kube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge_if",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$n_dir/cni/ipam",
        "ranges": [[{"subnet": "$n_pod_cidr"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
  cat >"$n_dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $n_ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $pki/ca.crt
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: $n_cgroup
failCgroupV1: false
failSwapOn: false
resolvConf: ""
containerRuntimeEndpoint: unix://$n_sock
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
registerNode: true
syncFrequency: 10s
EOF
  # The values the kubelet wants for these kernel settings, bind-mounted over
  # them inside the namespace: it finds them set and changes nothing on the
  # host (it would set panic_on_oops=1 and overcommit_memory=1 machine-wide).
  local kv
  for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
    kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
    install -d "$(dirname "$dir/sysctl/${kv%%=*}")"
    echo "${kv#*=}" >"$dir/sysctl/${kv%%=*}"
  done
}

# ---- processes -----------------------------------------------------------------

# in_node I CMD...: CMD in node I's namespaces; in_ns: in node 1's (the
# control plane's).
in_node() {
  local h
  h=$(holder_pid "$1") || die "node $1's namespace is gone"
  shift
  nsenter -t "$h" -n -m -- "$@"
}
in_ns() { in_node 1 "$@"; }

# start [-n I] NAME CMD...: a component in node I's namespaces (default 1),
# its PID recorded, its output in logs/NAME.log.
start() {
  local i=1 name h
  if [[ $1 == -n ]]; then
    i=$2
    shift 2
  fi
  name=$1
  shift
  h=$(holder_pid "$i")
  setsid nsenter -t "$h" -n -m -- "$@" >"$logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pids/$name"
  disown
}

running() { [[ -f $pids/$1 ]] && kill -0 "$(cat "$pids/$1")" 2>/dev/null; }

# wait_for WHAT SECONDS LOG CMD...: retry CMD until it succeeds.
wait_for() {
  local what=$1 secs=$2 log=$3 end
  shift 3
  end=$((SECONDS + secs))
  while ((SECONDS < end)); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    if [[ -n $log ]] && ! running "$log"; then
      tail -n 20 "$logs/$log.log" >&2
      die "$log exited while waiting for $what (log above, $logs/$log.log)"
    fi
    sleep 0.2
  done
  [[ -n $log ]] && tail -n 20 "$logs/$log.log" >&2
  die "timed out after ${secs}s waiting for $what${log:+ (log above, $logs/$log.log)}"
}

# node_namespace I: node I's private network + mount namespace, held by a
# process of its own ($pids/holder, holder-I), with tmpfs over /run,
# /var/lib and /var/log and the faked kernel settings. Its pods reach the
# pods of every node and the nodes' addresses, nothing routed beyond: not
# the host's end of node 1's veth, and (no default route) no address
# outside.
node_namespace() {
  node "$1"
  setsid unshare --net --mount --propagation private -- sleep infinity </dev/null >/dev/null 2>&1 &
  echo $! >"$pids/holder$n_sfx"
  disown
  local h k
  for ((k = 0; k < 50; k++)); do
    h=$(cat "$pids/holder$n_sfx")
    if [[ $(readlink "/proc/$h/ns/net") != $(readlink /proc/self/ns/net) ]]; then break; fi
    sleep 0.1
  done
  in_node "$n_i" ip link set lo up
  in_node "$n_i" sysctl -qw net.ipv4.ip_forward=1
  in_node "$n_i" ip rule add pref 90 iif "$bridge_if" to "$pod_net" lookup main
  in_node "$n_i" ip rule add pref 91 iif "$bridge_if" to "$link_net" lookup main
  in_node "$n_i" ip rule add pref 92 iif "$bridge_if" to "$node_ip" lookup main
  in_node "$n_i" ip rule add pref 100 iif "$bridge_if" prohibit
  in_node "$n_i" mount -t tmpfs -o mode=0755 tmpfs /run
  in_node "$n_i" mount -t tmpfs -o mode=0755 tmpfs /var/lib
  in_node "$n_i" mount -t tmpfs -o mode=0755 tmpfs /var/log
  local f
  while read -r f; do
    in_node "$n_i" mount --bind "$dir/sysctl/$f" "/proc/sys/$f"
  done < <(cd "$dir/sysctl" && find . -type f | sed 's|^\./||')
}

# make_namespace: every node's namespace. Node 1's holds a veth to the
# host ($host_if, where the host reaches the API server) and, with more
# nodes, the nodes' link: a bridge ($link_bridge, $link_net) that node N
# joins with a veth, no masquerade, a route per node to each other node's
# pods, and nothing forwarded from the link to the host.
make_namespace() {
  step "namespace: private network + mount namespace per node ($nodes), veth $host_if ($host_ip) <-> $node_if ($node_ip)$( ((nodes > 1)) && echo ", nodes linked on $link_net")"
  if ip link show "$host_if" >/dev/null 2>&1; then
    die "interface $host_if already exists (another cluster, or a down that failed); run: $0 down, or ip link del $host_if"
  fi
  local i j h
  for ((i = 1; i <= nodes; i++)); do node_namespace "$i"; done
  h=$(holder_pid 1)
  ip link add "$host_if" type veth peer name "$node_if" netns "$h"
  ip addr add "$host_ip/30" dev "$host_if"
  ip link set "$host_if" up
  in_ns ip addr add "$node_ip/30" dev "$node_if"
  in_ns ip link set "$node_if" up
  ((nodes > 1)) || return 0
  node 1
  in_ns ip link add "$link_bridge" type bridge
  in_ns ip addr add "$n_link_ip/24" dev "$link_bridge"
  in_ns ip link set "$link_bridge" up
  in_ns ip rule add pref 90 iif "$link_bridge" to "$pod_net" lookup main
  in_ns ip rule add pref 100 iif "$link_bridge" prohibit
  for ((i = 2; i <= nodes; i++)); do
    node "$i"
    in_ns ip link add "skbk-n$i" type veth peer name skbk-link netns "$(holder_pid "$i")"
    in_ns ip link set "skbk-n$i" master "$link_bridge" up
    in_node "$i" ip addr add "$n_ip/24" dev skbk-link
    in_node "$i" ip link set skbk-link up
    in_node "$i" ip route add "$node_ip/32" via "$a.$b.1.1"
  done
  local cidr via
  for ((j = 1; j <= nodes; j++)); do
    node "$j"
    cidr=$n_pod_cidr via=$n_link_ip
    for ((i = 1; i <= nodes; i++)); do
      ((i == j)) || in_node "$i" ip route add "$cidr" via "$via"
    done
  done
}

# node_procs I [EXCEPT...]: the processes of node I: every process in its
# mount namespace (containerd, shims, the kubelet; on node 1 also the
# control plane) and all their descendants (runsc sandboxes and gofers,
# which have namespaces of their own), but its holder and the processes
# EXCEPT and their descendants.
node_procs() {
  local h mnt p pp more=1
  h=$(holder_pid "$1") || return 0
  shift
  local -A in=() parent=() except=()
  for p in "$@"; do except[$p]=1; done
  mnt=$(readlink "/proc/$h/ns/mnt" 2>/dev/null) || return 0
  [[ -n $mnt && $mnt != "$(readlink /proc/self/ns/mnt)" ]] || return 0
  while read -r p pp; do
    parent[$p]=$pp
    [[ $p != "$h" && -z ${except[$p]:-} && $(readlink "/proc/$p/ns/mnt" 2>/dev/null) == "$mnt" ]] && in[$p]=1
  done < <(ps -e -o pid=,ppid=)
  while ((more)); do
    more=0
    for p in "${!parent[@]}"; do
      if [[ -z ${in[$p]:-} && -z ${except[$p]:-} && -n ${in[${parent[$p]}]:-} ]]; then
        in[$p]=1
        more=1
      fi
    done
  done
  echo "${!in[@]}"
}

# wait_gone PID...: wait up to 5 s until none of PID... is left.
wait_gone() {
  local p alive
  for _ in $(seq 1 50); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
}

# stop_procs PID...: TERM, up to 5 s, then KILL.
stop_procs() {
  local p
  (($# > 0)) || return 0
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  wait_gone "$@"
  for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; done
}

# start_node I: node I's containerd (its images imported) and kubelet; the
# caller waits for the node to be Ready (wait_node).
start_node() {
  node "$1"
  step "containerd ($n_name): $(containerd --version | cut -d' ' -f3) at $n_sock, runtime handler gvisor = runc v2 shim + $n_dir/bin/runsc-cri"
  start -n "$n_i" "containerd$n_sfx" env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    containerd --config "$n_dir/containerd/config.toml"
  wait_for "containerd of $n_name" 30 "containerd$n_sfx" ctr --address "$n_sock" version
  local img
  for img in pause busybox; do
    in_node "$n_i" ctr --address "$n_sock" -n k8s.io images import "$cache/images/$img.tar" >>"$logs/images.log" 2>&1 ||
      die "importing $cache/images/$img.tar into $n_name failed (log $logs/images.log)"
  done
  step "kubelet: node $n_name at $n_ip, pods on $n_pod_cidr, cgroups under $n_cgroup"
  local c
  for c in /sys/fs/cgroup/*/; do
    [[ -f $c/cgroup.procs && ! -L ${c%/} ]] && mkdir -p "$c${n_cgroup#/}"
  done
  start -n "$n_i" "kubelet$n_sfx" "$bin/kubelet" --config "$n_dir/kubelet/config.yaml" --kubeconfig "$dir/kubelet$n_sfx.kubeconfig" \
    --root-dir "$n_dir/kubelet/root" --cert-dir "$n_dir/kubelet/pki" \
    --hostname-override "$n_name" --node-ip "$n_ip"
}

wait_node() {
  node "$1"
  wait_for "node $n_name Ready" 120 "kubelet$n_sfx" \
    kubectl_ wait --for=condition=Ready "node/$n_name" --timeout=2s
}

# nft_queue_config: what the kernel's config says of nftables' queue
# expression, which kube-network-policies needs (see the header).
nft_queue_config() {
  local line
  line=$( (zcat /proc/config.gz 2>/dev/null || true) | grep -E '^(# )?CONFIG_NFT_QUEUE[= ]' || true)
  echo "${line:-CONFIG_NFT_QUEUE unknown: no /proc/config.gz}"
}

up() {
  [[ $(id -u) -eq 0 ]] || die "up needs root (namespaces, mounts, containerd)"
  case $dir in
  /run/* | /var/lib/* | /var/log/*) die "KUBE_DIR=$dir is hidden by the namespace's tmpfs over /run, /var/lib and /var/log; choose another" ;;
  esac
  if holder_pid >/dev/null && running kubelet && running kube-apiserver; then
    step "already up ($dir); $0 down first to restart"
    return
  fi
  [[ $nodes =~ ^[1-9]$ ]] || die "KUBE_NODES=$nodes: the test cluster has 1 to 9 nodes"
  local t0=$SECONDS
  build_cache
  command -v containerd >/dev/null || die "containerd is not installed: apt-get install containerd"
  (( ${#sock} <= 100 )) || die "$sock is too long for a socket path; use a shorter KUBE_DIR"
  down_quiet=1 down
  install -d -m 0711 "$dir"
  install -d "$logs" "$pids"
  write_pki
  local i
  for ((i = 1; i <= nodes; i++)); do
    write_runsc_wrapper "$i"
    write_configs "$i"
  done
  trap 'if (($? != 0)); then step "up failed; stopping what it started (logs stay in $logs)"; down_quiet=1 down; fi' EXIT
  trap 'exit 1' INT TERM
  make_namespace

  step "etcd: $(grep etcd-server "$cache/debian/VERSIONS" || true) on 127.0.0.1:2379"
  start etcd "$cache/debian/usr/bin/etcd" --name "$node_name" --data-dir "$dir/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$node_name=http://127.0.0.1:2380"
  wait_for etcd 30 etcd in_ns curl -fsS http://127.0.0.1:2379/health

  step "kube-apiserver: https://$node_ip:6443"
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --bind-address "$node_ip" --advertise-address "$node_ip" --secure-port 6443 \
    --service-cluster-ip-range "$svc_cidr" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet.crt" --kubelet-client-key "$pki/apiserver-kubelet.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --kubelet-preferred-address-types InternalIP \
    --profiling=false
  wait_for "kube-apiserver /readyz" 90 kube-apiserver \
    curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "https://$node_ip:6443/readyz"

  step "kube-controller-manager, kube-scheduler"
  start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$dir/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/controller-manager.kubeconfig" --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --allocate-node-cidrs=false --profiling=false
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$dir/scheduler.kubeconfig" \
    --authentication-kubeconfig "$dir/scheduler.kubeconfig" --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false

  for ((i = 1; i <= nodes; i++)); do start_node "$i"; done
  for ((i = 1; i <= nodes; i++)); do wait_node "$i"; done

  step "RuntimeClass gvisor; waiting for the default service account"
  kubectl_ apply -f - >>"$logs/kubectl.log" 2>&1 <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
handler: gvisor
EOF
  wait_for "service account default/default" 60 kube-controller-manager kubectl_ get serviceaccount default -n default
  step "NetworkPolicy: not enforced (no enforcer: kube-network-policies needs CONFIG_NFT_QUEUE, $(nft_queue_config))"
  import_interpreters
  kubectl_ apply -f "$here/../examples/kubernetes/namespace.yaml" >>"$logs/kubectl.log" 2>&1 || die "namespace skillbox: kubectl apply failed (log $logs/kubectl.log)"
  write_skillbox_config
  trap - EXIT INT TERM
  step "up in $((SECONDS - t0)) s, $nodes node(s); $(cmd_env | head -1)"
  step "run skills on it: skillbox run --config $dir/skillbox.hcl SKILL SCRIPT"
}

# write_skillbox_config writes $dir/skillbox.hcl, a config that runs
# skillbox's jobs on this cluster: its kubeconfig, the agent data path (no
# registry: up imported the agent's images) and node 1's network
# namespace, the one the daemon reaches the pods from (the host has no
# route to them).
write_skillbox_config() {
  local h
  h=$(holder_pid 1) || die "node 1's namespace is gone"
  cat >"$dir/skillbox.hcl" <<EOF
# Written by hack/kube.sh up: skillbox on the test cluster of $dir.
daemon {
  runtime = "kubernetes"
}
runtime "kubernetes" {
  kubeconfig   = "$dir/admin.kubeconfig"
  data_path    = "agent"
  egress_netns = "/proc/$h/ns/net"
}
EOF
}

# import_interpreters imports skillbox's interpreter images (the image
# store SKILLBOX_IMAGES, default /var/lib/skillbox/images; KUBE_IMAGES
# names some, "none" none) into every node by the digest references the
# kubernetes runtime's pods run (skillbox images export), so that runs of
# those images need no import. A store or a skillbox binary that is not
# there is said and skipped.
import_interpreters() {
  local store=${SKILLBOX_IMAGES:-/var/lib/skillbox/images} sb=${SKILLBOX_BIN:-}
  if [[ ${KUBE_IMAGES:-} == none ]]; then
    step "interpreter images: none imported (KUBE_IMAGES=none)"
    return
  fi
  [[ -n $sb ]] || sb=$here/../bin/skillbox
  [[ -x $sb ]] || sb=$(command -v skillbox || true)
  if [[ -z $sb ]]; then
    step "interpreter images: not imported: no skillbox binary (make build, or SKILLBOX_BIN=PATH); later: skillbox images export --out F && $0 import F"
    return
  fi
  if [[ ! -f $store/oci/index.json ]]; then
    step "interpreter images: not imported: no image store at $store (SKILLBOX_IMAGES); build them (skillbox images build), then: skillbox images export --dir $store --out F && $0 import F"
    return
  fi
  local t=$SECONDS archive=$dir/interpreters.tar names=()
  [[ -n ${KUBE_IMAGES:-} ]] && read -r -a names <<<"$KUBE_IMAGES"
  # --agent: each image's agent image too (data_path = "agent"), built
  # from the same binary the tests' daemon runs its agents from.
  if ! "$sb" images export --agent --dir "$store" --out "$archive" "${names[@]}" >"$logs/interpreters.log" 2>&1; then
    cat "$logs/interpreters.log" >&2
    if grep -q 'no built images' "$logs/interpreters.log"; then
      step "interpreter images: not imported: none built in $store"
      return
    fi
    die "interpreter images: skillbox images export --dir $store failed (above)"
  fi
  import_all "$archive" >>"$logs/images.log" 2>&1 || die "interpreter images: import failed (log $logs/images.log)"
  rm -f "$archive"
  step "interpreter images and their agent images on every node in $((SECONDS - t)) s: $(cut -f3 "$logs/interpreters.log" | paste -sd' ')"
}

# import_all FILE: import the OCI archive FILE into every running node's
# containerd (namespace k8s.io), the nodes in parallel.
import_all() {
  local i pids_=() rc=0 p
  for i in $(node_indexes); do
    node "$i"
    if ! running "containerd$n_sfx"; then
      step "import: node $n_name is down (node-down): not imported there"
      continue
    fi
    in_node "$i" ctr --address "$n_sock" -n k8s.io images import "$1" &
    pids_+=($!)
  done
  for p in "${pids_[@]}"; do wait "$p" || rc=1; done
  return $rc
}

cmd_import() {
  local in=$1 tmp=
  holder_pid >/dev/null && running containerd || die "the cluster is not up: $0 up first"
  [[ $in == - || -f $in ]] || die "import: no file $in"
  if [[ $in == - ]]; then
    # Every node reads the archive: keep stdin in a file first.
    tmp=$(mktemp "$dir/import.XXXXXX.tar")
    cat >"$tmp"
    in=$tmp
  fi
  local rc=0
  import_all "$in" || rc=$?
  [[ -n $tmp ]] && rm -f "$tmp"
  ((rc == 0)) || die "importing $1 failed"
}

# cmd_env: the cluster's kubeconfig and kubectl, the nodes (KUBE_NODES,
# comma-separated), and of each node I its name, address, pod subnet,
# network namespace (nsenter --net=FILE reaches it) and containerd socket.
# KUBE_NETNS is node 1's network namespace, from where the API server,
# every node and every pod's IP are reached.
cmd_env() {
  echo "KUBECONFIG=$dir/admin.kubeconfig"
  echo "KUBECTL=$bin/kubectl"
  [[ -f $dir/skillbox.hcl ]] && echo "KUBE_SKILLBOX_CONFIG=$dir/skillbox.hcl"
  local i h names=()
  for i in $(node_indexes); do
    node "$i"
    names+=("$n_name")
  done
  ((${#names[@]} > 0)) || return 0
  echo "KUBE_NODES=$(IFS=,; echo "${names[*]}")"
  h=$(holder_pid 1 || true)
  [[ -n $h ]] && echo "KUBE_NETNS=/proc/$h/ns/net"
  for i in $(node_indexes); do
    node "$i"
    h=$(holder_pid "$i" || true)
    echo "KUBE_NODE_${i}=$n_name"
    echo "KUBE_NODE_${i}_IP=$n_ip"
    echo "KUBE_NODE_${i}_POD_CIDR=$n_pod_cidr"
    [[ -n $h ]] && echo "KUBE_NODE_${i}_NETNS=/proc/$h/ns/net"
    echo "KUBE_NODE_${i}_CONTAINERD=$n_sock"
  done
}

# node_down NAME: the loss of node NAME: its kubelet, containerd, shims
# and sandboxes are killed (SIGKILL, as a machine that dies); its
# namespace and files stay, for node_up. The control plane (node 1's)
# keeps running.
node_down() {
  local i cp=() n victims
  i=$(node_index "$1")
  node "$i"
  if ((i == 1)); then
    for n in etcd kube-apiserver kube-controller-manager kube-scheduler; do
      running "$n" && cp+=("$(cat "$pids/$n")")
    done
  fi
  read -r -a victims <<<"$(node_procs "$i" "${cp[@]}")"
  step "node-down $n_name: killing its kubelet, containerd, shims and sandboxes (${#victims[@]} processes)"
  for n in "${victims[@]}"; do kill -KILL "$n" 2>/dev/null || true; done
  rm -f "$pids/kubelet$n_sfx" "$pids/containerd$n_sfx"
}

# node_up NAME: node NAME's containerd and kubelet again, after node_down;
# waits until the node is Ready.
node_up() {
  local i t=$SECONDS
  i=$(node_index "$1")
  node "$i"
  holder_pid "$i" >/dev/null || die "node $n_name's namespace is gone: $0 up"
  if running "kubelet$n_sfx"; then
    step "node-up $n_name: its kubelet is running"
    return
  fi
  start_node "$i"
  wait_node "$i"
  step "node-up $n_name: Ready in $((SECONDS - t)) s"
}

down_quiet=
down() {
  local say=step
  [[ -n $down_quiet ]] && say=:
  [[ -d $pids ]] || return 0
  local n p i victims=() hs=()
  $say "down: stopping the kubelets and the control plane"
  for n in "$pids"/kubelet* kube-scheduler kube-controller-manager kube-apiserver; do
    n=${n##*/}
    if running "$n"; then kill -TERM "$(cat "$pids/$n")" 2>/dev/null || true; fi
  done
  # Each node's containers (node_procs): containerd, shims, sandboxes.
  for i in $(node_indexes); do
    read -r -a p <<<"$(node_procs "$i")"
    victims+=("${p[@]}")
    p=$(holder_pid "$i" || true)
    [[ -n $p ]] && hs+=("$p")
  done
  $say "down: stopping containerd, its shims and sandboxes (${#victims[@]} processes)"
  stop_procs "${victims[@]}"
  for n in "$pids"/*; do
    n=${n##*/}
    [[ $n == holder* ]] && continue
    if running "$n"; then kill -KILL "$(cat "$pids/$n")" 2>/dev/null || true; fi
  done
  if ((${#hs[@]} > 0)); then
    $say "down: removing the namespaces (pids ${hs[*]}) and interface $host_if"
    for p in "${hs[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait_gone "${hs[@]}"
  fi
  ip link del "$host_if" 2>/dev/null || true
  for _ in $(seq 1 50); do
    ip link show "$host_if" >/dev/null 2>&1 || break
    sleep 0.1
  done
  # Empty pod cgroups the kubelets and runsc made (the namespaces share the
  # host's cgroup hierarchy).
  local c
  for c in /sys/fs/cgroup/*/"${cgroup_root#/}" /sys/fs/cgroup/*/"${cgroup_root#/}"-[0-9]; do
    [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # State goes; logs stay for the reader.
  local f
  for f in "$dir"/*; do
    [[ $f == "$logs" ]] && continue
    rm -rf --one-file-system "$f"
  done
  $say "down: done (logs in $logs)"
}

# Sourcing the script (for debugging) defines the functions only.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0
case ${1:-}:$# in
up:1) up ;;
down:1) down ;;
env:1) cmd_env ;;
import:2) cmd_import "$2" ;;
node-down:2) node_down "$2" ;;
node-up:2) node_up "$2" ;;
etcd-bin:1) lock_cache && fetch_debs >&2 && echo "$cache/debian/usr/bin/etcd" ;;
build:1) build_cache ;;
*) usage ;;
esac
