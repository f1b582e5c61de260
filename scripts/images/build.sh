#!/usr/bin/env bash
# Builds skiff's offline test images as docker-archive tarballs, without any registry:
#   skiff.local/busybox:1.35  busybox-static applets; default command serves /var/www over HTTP
#                             on port 80 (`httpd -f -p 80 -h /var/www` under a shell that
#                             exits on SIGTERM: httpd as PID 1 would ignore it, and every
#                             rollout or drain would wait out the 30 s grace period).
# The sandbox ("pause") image is not built here: every node carries its own in the skiff binary
# (crates/kubelet/src/sandbox_image.rs) and imports it at start.
# Needs Debian's busybox-static package (apt-get install -y busybox-static), tar, sha256sum.
# Usage: scripts/images/build.sh [OUT_DIR]   (default: target/images)
# Import:  skiff images import OUT_DIR/*.tar   (or ctr -n k8s.io images import FILE)
set -euo pipefail

OUT_DIR="${1:-$(cd "$(dirname "$0")/../.." && pwd)/target/images}"
BUSYBOX="${BUSYBOX:-/bin/busybox}"
mkdir -p "$OUT_DIR"

if ! file_out="$(LC_ALL=C od -An -c -N4 "$BUSYBOX" 2>/dev/null)" || [[ "$file_out" != *"E   L   F"* ]]; then
    echo "error: $BUSYBOX is missing; install it with: apt-get install -y busybox-static" >&2
    exit 1
fi
if ! "$BUSYBOX" --list >/dev/null 2>&1; then
    echo "error: $BUSYBOX does not run" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# make_rootfs DIR: busybox plus a symlink per applet and the files most programs expect.
make_rootfs() {
    local root="$1"
    mkdir -p "$root"/{bin,etc,tmp,var/www,root,proc,sys,dev}
    chmod 1777 "$root/tmp"
    cp "$BUSYBOX" "$root/bin/busybox"
    chmod 0755 "$root/bin/busybox"
    local applet
    for applet in $("$BUSYBOX" --list); do
        [[ "$applet" == "busybox" ]] && continue
        ln -sf busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    : >"$root/etc/hosts"
    : >"$root/etc/resolv.conf"
}

# json_array ITEM...: a JSON array of strings (items must not contain quotes or backslashes).
json_array() {
    local out="" item
    for item in "$@"; do out+="${out:+,}\"$item\""; done
    printf '[%s]' "$out"
}

# pack NAME REF ROOTFS CMD...: writes OUT_DIR/NAME.tar, a docker-archive of one layer.
pack() {
    local name="$1" ref="$2" root="$3"
    shift 3
    local img="$work/$name-img"
    mkdir -p "$img"
    # Reproducible layer: fixed owner, mtime and order.
    tar --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -C "$root" -cf "$img/layer.tar" .
    local diff_id
    diff_id="$(sha256sum "$img/layer.tar" | cut -d' ' -f1)"
    mkdir -p "$img/$diff_id"
    mv "$img/layer.tar" "$img/$diff_id/layer.tar"
    local config
    config=$(printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"skiff scripts/images/build.sh"}]}' \
        "$(json_array "$@")" "$diff_id")
    local config_id
    config_id="$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)"
    printf '%s' "$config" >"$img/$config_id.json"
    printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$config_id" "$ref" "$diff_id" >"$img/manifest.json"
    tar --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -C "$img" -cf "$OUT_DIR/$name.tar" .
    echo "built $OUT_DIR/$name.tar ($ref)"
}

make_rootfs "$work/busybox"
cat >"$work/busybox/var/www/index.html" <<'HTML'
<!DOCTYPE html>
<html><head><title>skiff</title></head><body><h1>Hello from skiff busybox</h1></body></html>
HTML
pack busybox skiff.local/busybox:1.35 "$work/busybox" /bin/sh -c "trap 'exit 0' TERM INT; /bin/busybox httpd -f -p 80 -h /var/www & wait"
