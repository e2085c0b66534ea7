#!/usr/bin/env bash
# A real one-node Kubernetes cluster for the end-to-end tests, everything
# under $E2E_DIR (default bin/e2e): containerd with runc and a CNI bridge,
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a
# kubelet, all on this machine's own address; nothing is pulled.
#
#   hack/e2e/cluster.sh up      start it (images from $E2E_DIR/images/*.tar)
#   hack/e2e/cluster.sh down    stop what up started, by PID, and remove its
#                               mounts, bridge, iptables rules and cgroups
#   hack/e2e/cluster.sh restart-apiserver [SECONDS]
#                               stop the API server, wait, start it again
#
# Needs root, Debian's containerd, runc, containernetworking-plugins,
# iptables and openssl, and the binaries of `hack/setup-envtest.sh node`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# Its real path: the mounts found under it are named so (bin/ may be a link).
N=$(realpath -m "${E2E_DIR:-$root/bin/e2e}")
KUBE_BIN=${KUBE_BIN:-$root/bin/k8s}
HOST_IP=${HOST_IP:-$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')}
HOST_IP=${HOST_IP:-$(hostname -I | awk '{print $1}')}
NODE=e2e-node
API_PORT=26443
ETCD_PORT=23790
SVC_CIDR=10.97.0.0/24
SVC_IP=10.97.0.1
POD_CIDR=10.245.0.0/24
BRIDGE=looprun-e2e0
CGROUP_ROOT=/looprun-e2e
SOCK=$N/run/containerd.sock
export PATH=$KUBE_BIN:/usr/sbin:/usr/bin:/sbin:/bin
export KUBECONFIG=$N/admin.kubeconfig

log() { echo "cluster: $*" >&2; }

# start NAME CMD...: in its own session (so down stops exactly its group),
# its PID in run/NAME.pid and its output in logs/NAME.log.
start() {
	local name=$1
	shift
	if [[ -f $N/run/$name.pid ]] && kill -0 "$(cat "$N/run/$name.pid")" 2>/dev/null; then return 0; fi
	setsid "$@" >>"$N/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$N/run/$name.pid"
}

# until SECONDS WHAT CMD...: run CMD until it succeeds.
until_ok() {
	local limit=$1 what=$2
	shift 2
	local t0=$SECONDS
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS - t0 > limit)); then
			log "gave up waiting for $what after ${limit}s; see $N/logs"
			return 1
		fi
		sleep 0.5
	done
}

pki() {
	local d=$N/pki
	mkdir -p "$d"
	[[ -f $d/ca.crt ]] || openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 3650 -subj /CN=looprun-e2e-ca 2>/dev/null
	cert() { # NAME SUBJECT [SAN]
		[[ -f $d/$1.crt ]] && return 0
		openssl req -newkey rsa:2048 -nodes -keyout "$d/$1.key" -out "$d/$1.csr" -subj "$2" 2>/dev/null
		if [[ -n ${3:-} ]]; then
			printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$d/$1.ext"
		else
			printf 'extendedKeyUsage=clientAuth\n' >"$d/$1.ext"
		fi
		openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -out "$d/$1.crt" -days 3650 -extfile "$d/$1.ext" 2>/dev/null
	}
	cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:$HOST_IP,IP:$SVC_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert admin /CN=admin/O=system:masters
	cert kubelet-client /CN=kube-apiserver-kubelet-client/O=system:masters
	cert node "/CN=system:node:$NODE/O=system:nodes"
	[[ -f $d/sa.key ]] || {
		openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
		openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
	}
	for user in admin node; do
		cat >"$N/$user.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://$HOST_IP:$API_PORT", certificate-authority: "$d/ca.crt"}
users:
- name: $user
  user: {client-certificate: "$d/$user.crt", client-key: "$d/$user.key"}
contexts:
- name: e2e
  context: {cluster: e2e, user: $user}
current-context: e2e
EOF
	done
}

runtime_up() {
	mkdir -p "$N/etc/cni" "$N/data/containerd" "$N/data/cni" "$N/run/containerd"
	# A module of its own: go build ./..., go vet and golangci-lint then
	# skip the node's files, which come and go while the cluster runs.
	printf 'module e2e.invalid/node\n' >"$N/go.mod"
	cat >"$N/etc/cni/10-e2e.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "looprun-e2e", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$N/data/cni", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
	# restrict_oom_score_adj: this machine may not lower OOM scores (no
	# CAP_SYS_RESOURCE), which runc would otherwise do for every sandbox.
	cat >"$N/etc/containerd.toml" <<EOF
version = 2
root = "$N/data/containerd"
state = "$N/run/containerd"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$N/data/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$N/run/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$N/etc/cni"
    max_conf_num = 1
EOF
	start containerd containerd --config "$N/etc/containerd.toml"
	until_ok 30 containerd ctr --address "$SOCK" version
	load_images
}

# load_images imports every archive of $N/images into the node.
load_images() {
	local f
	for f in "$N"/images/*.tar; do
		[[ -e $f ]] || continue
		ctr --address "$SOCK" -n k8s.io images import "$f" >/dev/null
	done
}

apiserver_up() {
	local p=$N/pki
	start kube-apiserver kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address "$HOST_IP" --advertise-address "$HOST_IP" --secure-port $API_PORT \
		--tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
		--service-cluster-ip-range $SVC_CIDR --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--kubelet-client-certificate "$p/kubelet-client.crt" --kubelet-client-key "$p/kubelet-client.key" \
		--kubelet-preferred-address-types InternalIP,Hostname --profiling=false
	until_ok 120 kube-apiserver kubectl get --raw /readyz
}

control_plane_up() {
	local p=$N/pki
	mkdir -p "$N/data/etcd"
	start etcd "$KUBE_BIN/etcd" --name e2e --data-dir "$N/data/etcd" --unsafe-no-fsync \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls http://127.0.0.1:$((ETCD_PORT + 10)) --initial-advertise-peer-urls http://127.0.0.1:$((ETCD_PORT + 10)) \
		--initial-cluster e2e=http://127.0.0.1:$((ETCD_PORT + 10))
	apiserver_up
	start kube-controller-manager kube-controller-manager --kubeconfig "$KUBECONFIG" \
		--authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
		--bind-address 127.0.0.1 --secure-port 26257 --leader-elect=false \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" --use-service-account-credentials \
		--cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
		--service-cluster-ip-range $SVC_CIDR --allocate-node-cidrs=false --controllers '*'
	start kube-scheduler kube-scheduler --kubeconfig "$KUBECONFIG" \
		--authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
		--bind-address 127.0.0.1 --secure-port 26259 --leader-elect=false
	# No kube-proxy: one DNAT rule takes in-cluster clients (the operator)
	# from the kubernetes Service to the API server.
	local rule="-d $SVC_IP/32 -p tcp --dport 443 -j DNAT --to-destination $HOST_IP:$API_PORT"
	echo "$rule" >"$N/run/dnat.rule"
	for chain in PREROUTING OUTPUT; do
		# shellcheck disable=SC2086
		iptables -t nat -C $chain $rule 2>/dev/null || iptables -t nat -A $chain $rule
	done
}

kubelet_up() {
	local h
	# The cgroupfs driver wants its root in every hierarchy.
	for h in /sys/fs/cgroup/*/; do
		[[ $(stat -fc %T "$h") == cgroupfs ]] || continue
		mkdir -p "$h$CGROUP_ROOT"
		if [[ -f $h/cpuset.cpus && -z $(cat "$h$CGROUP_ROOT/cpuset.cpus") ]]; then
			cat "$h/cpuset.cpus" >"$h$CGROUP_ROOT/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h$CGROUP_ROOT/cpuset.mems"
		fi
	done
	if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then mkdir -p "/sys/fs/cgroup$CGROUP_ROOT"; fi
	mkdir -p "$N/data/kubelet" "$N/data/pod-logs"
	cat >"$N/etc/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
containerRuntimeEndpoint: unix://$SOCK
failSwapOn: false
port: 20250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 20248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: $N/pki/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: $N/data/pod-logs
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
EOF
	start kubelet kubelet --config "$N/etc/kubelet.yaml" --kubeconfig "$N/node.kubeconfig" \
		--root-dir "$N/data/kubelet" --hostname-override $NODE --node-ip "$HOST_IP" --v 1
	until_ok 180 "node $NODE Ready" kubectl wait --for condition=Ready node/$NODE --timeout 5s
	until_ok 60 "the default service account" kubectl get serviceaccount default
}

up() {
	[[ -n $HOST_IP ]] || {
		log "no address of this machine to serve on"
		exit 1
	}
	mkdir -p "$N/run" "$N/logs" "$N/etc" "$N/data"
	[[ -f $N/run/ip_forward ]] || cat /proc/sys/net/ipv4/ip_forward >"$N/run/ip_forward"
	local t0=$SECONDS
	pki
	runtime_up
	control_plane_up
	kubelet_up
	log "node $NODE Ready in $((SECONDS - t0))s; KUBECONFIG=$KUBECONFIG"
}

# stop NAME: TERM its process group, KILL it after 10 s.
stop() {
	local f=$N/run/$1.pid pid
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 40); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL -- "-$pid" 2>/dev/null || true
	fi
	rm -f "$f"
}

alive() { [[ -f $N/run/$1.pid ]] && kill -0 "$(cat "$N/run/$1.pid")" 2>/dev/null; }

# unmount_all unmounts what is mounted under $N, deepest first.
unmount_all() {
	local m
	for m in $(awk -v n="$N/" 'index($5, n) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
}

down() {
	if [[ ! -d $N/run ]]; then
		# Nothing runs; what a teardown cut short left goes.
		unmount_all
		rm -rf "$N/data" "$N/etc" "$N/pv"
		return 0
	fi
	local c=(ctr --address "$SOCK" -n k8s.io) t m h
	# Nothing may start Pods while they go; the kubelet tears its Pods
	# down itself (network, volumes, cgroups) if it can.
	stop kube-controller-manager
	stop kube-scheduler
	if alive kubelet && alive kube-apiserver; then
		kubectl delete pods --all -A --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
		for _ in $(seq 1 60); do
			[[ -z $("${c[@]}" tasks ls -q 2>/dev/null) ]] && break
			sleep 0.5
		done
	fi
	stop kubelet
	if alive containerd; then
		for t in $("${c[@]}" tasks ls -q 2>/dev/null); do "${c[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
		sleep 1
		for t in $("${c[@]}" tasks ls -q 2>/dev/null); do "${c[@]}" tasks delete -f "$t" >/dev/null 2>&1 || true; done
		for t in $("${c[@]}" containers ls -q 2>/dev/null); do "${c[@]}" containers delete "$t" >/dev/null 2>&1 || true; done
	fi
	stop kube-apiserver
	stop etcd
	stop containerd
	# Shims outlive containerd: each is the parent of a task's init.
	for f in "$N"/run/containerd/io.containerd.runtime.v2.task/*/*/init.pid; do
		[[ -f $f ]] || continue
		local init shim
		init=$(cat "$f")
		shim=$(ps -o ppid= -p "$init" 2>/dev/null | tr -d ' ' || true)
		if [[ -n $shim && $shim != 1 ]] && grep -q containerd-shim "/proc/$shim/cmdline" 2>/dev/null; then kill -KILL "$shim" 2>/dev/null || true; fi
		kill -KILL "$init" 2>/dev/null || true
	done
	for f in "$N"/run/containerd/io.containerd.runtime.v2.task/*/*/shim.pid; do
		[[ -f $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null || true
	done
	unmount_all
	if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" || true; fi
	# The bridge plugin's masquerade chains for the Pod network, and the DNAT.
	local prefix=${POD_CIDR%.*}.
	for m in $(iptables -t nat -L POSTROUTING -n --line-numbers 2>/dev/null | awk -v p="$prefix" '$2 ~ /^CNI-/ && index($5, p) == 1 {print $1}' | sort -rn); do
		iptables -t nat -D POSTROUTING "$m" || true
	done
	for t in $(iptables -t nat -S 2>/dev/null | awk '/^-N CNI-/ {print $2}'); do
		if ! iptables -t nat -S POSTROUTING | grep -qw -- "$t"; then
			iptables -t nat -F "$t" 2>/dev/null || true
			iptables -t nat -X "$t" 2>/dev/null || true
		fi
	done
	if [[ -f $N/run/dnat.rule ]]; then
		for chain in PREROUTING OUTPUT; do
			# shellcheck disable=SC2046
			iptables -t nat -D $chain $(cat "$N/run/dnat.rule") 2>/dev/null || true
		done
	fi
	for t in nat mangle filter; do iptables -t $t -X KUBE-KUBELET-CANARY 2>/dev/null || true; done
	if [[ -f $N/run/ip_forward ]]; then cat "$N/run/ip_forward" >/proc/sys/net/ipv4/ip_forward; fi
	for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
		[[ -d $h$CGROUP_ROOT ]] || continue
		find "$h$CGROUP_ROOT" -depth -type d -exec rmdir {} \; 2>/dev/null || true
		[[ -d $h$CGROUP_ROOT ]] && log "could not remove the cgroup $h$CGROUP_ROOT"
	done
	# State goes; images, binaries and certificates stay for the next up.
	rm -rf "$N/run" "$N/data" "$N/etc" "$N/pv"
	log "down"
}

case ${1:-} in
up) up ;;
down) down ;;
load-images) load_images ;;
restart-apiserver)
	# What an upgrade or a crash of the control plane does to its clients:
	# the API server goes for ${2:-0} seconds, then comes back.
	stop kube-apiserver
	sleep "${2:-0}"
	apiserver_up
	;;
*)
	echo "usage: $0 up|down|load-images|restart-apiserver [SECONDS]" >&2
	exit 2
	;;
esac
