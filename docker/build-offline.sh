#!/usr/bin/env bash
# Builds docker/Dockerfile's image with buildah where no container registry can be reached (an air-gapped
# build host, or this project's build machine): the two base images the Dockerfile starts from are made
# locally, from Debian's packages (debootstrap) and, for the build stage, the Rust toolchain already
# installed on this host (`rustc --print sysroot`). Crates still come from the Cargo registry.
#
#   bash docker/build-offline.sh [TAG]          (from the repository root; TAG: localhost/kafka-mirror-proxy:dev)
#
# Needs root and Debian's buildah and debootstrap (`apt-get install buildah debootstrap`). With a registry
# in reach, use the Dockerfile's defaults instead (`docker build` / `buildah bud` with no --build-arg).
#
# Base images (kept, so a second run only rebuilds the project; KMP_REBUILD_BASE=1 makes them again):
#   localhost/kmp-debian:bookworm-slim   debootstrap --variant=minbase: the runtime stage
#   localhost/kmp-rust:bookworm          debootstrap --variant=buildd + this host's Rust toolchain
# Scratch space: $KMP_IMAGE_WORK (default target/image-build).
set -euo pipefail

tag=${1:-localhost/kafka-mirror-proxy:dev}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${KMP_IMAGE_WORK:-$repo/target/image-build}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
release=bookworm
runtime_image=localhost/kmp-debian:$release-slim
builder_image=localhost/kmp-rust:$release

for tool in buildah debootstrap rustc; do
    command -v "$tool" >/dev/null || { echo "Error: $tool is not installed" >&2; exit 1; }
done
mkdir -p "$work"

have_image() { [ "${KMP_REBUILD_BASE:-0}" != 1 ] && buildah inspect --type image "$1" >/dev/null 2>&1; }

# A root file system from Debian's packages, imported as an image with the given config changes.
make_base() {
    local image=$1 variant=$2 include=$3 dir=$work/rootfs-$2
    shift 3
    echo "== $image: debootstrap --variant=$variant $release"
    rm -rf "$dir"
    debootstrap --variant="$variant" ${include:+--include="$include"} "$release" "$dir" "$mirror" \
        > "$work/debootstrap-$variant.log" 2>&1 \
        || { tail -20 "$work/debootstrap-$variant.log" >&2; exit 1; }
    "$@" "$dir"
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    local ctr
    tar -C "$dir" --numeric-owner -cf "$work/rootfs-$variant.tar" .
    ctr=$(buildah from scratch)
    # A local tar archive is unpacked as it is (owners, modes, device nodes); no container runs for this.
    buildah add --quiet "$ctr" "$work/rootfs-$variant.tar" / >/dev/null
    buildah config --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/bash "$ctr"
    if [ "$variant" = buildd ]; then
        buildah config --env CARGO_HOME=/usr/local/cargo "$ctr"
    fi
    buildah commit --quiet --rm "$ctr" "$image" >/dev/null
    rm -rf "$dir" "$work/rootfs-$variant.tar"
}

no_change() { :; }

# The host's toolchain under /usr/local/rust, with cargo, rustc and rustdoc on the image's PATH the way
# the official rust image has them (/usr/local/cargo/bin). Its documentation is left out.
add_rust() {
    local sysroot version
    sysroot=$(rustc --print sysroot)
    version=$(rustc --version)
    echo "   + $version from $sysroot"
    mkdir -p "$1/usr/local/rust" "$1/usr/local/cargo/bin"
    tar -C "$sysroot" --exclude=./share/doc -cf - . | tar -C "$1/usr/local/rust" -xf -
    for bin in cargo rustc rustdoc; do
        ln -s "../../rust/bin/$bin" "$1/usr/local/cargo/bin/$bin"
    done
    # The build stage downloads crates: it trusts the certificate authorities this host trusts (a
    # TLS-inspecting proxy's among them, where the registry is reached through one). The runtime image
    # keeps Debian's own.
    cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/ca-certificates.crt"
}

have_image "$runtime_image" || make_base "$runtime_image" minbase "" no_change
have_image "$builder_image" || make_base "$builder_image" buildd ca-certificates,git add_rust

echo "== $tag: buildah bud -f docker/Dockerfile"
# chroot isolation: the RUN steps need no OCI runtime, cgroups or user namespaces.
buildah bud --isolation chroot --layers \
    --build-arg BUILDER_IMAGE="$builder_image" \
    --build-arg RUNTIME_IMAGE="$runtime_image" \
    -f "$repo/docker/Dockerfile" -t "$tag" "$repo"
buildah images "$tag"
