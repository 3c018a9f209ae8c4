#!/bin/bash
# tests/interop/vm.sh - fabrik's kernel-interop VM harness (adapted from the vmharness
# reference; this copy is ours).  Boots a throw-away Debian 12 (linux 6.1) QEMU guest that has the kernel
# NVMe-oF host+target (tcp, rdma), Soft-RoCE (rdma_rxe), nvme-cli,
# rdma-core userspace (libibverbs + rxe provider, librdmacm), perftest, fio,
# iproute2 and bash in an initramfs, run ONE guest script non-interactively,
# print its output and return its exit status.
#
# Usage:
#   vm.sh deps                    only install the host packages (qemu, binutils, xz)
#   vm.sh prepare                 download + extract packages, build initramfs (idempotent)
#   vm.sh run SCRIPT [ARGS...]    boot, run SCRIPT in the guest, power off
#   vm.sh shell                   boot into an interactive busybox/bash shell (Ctrl-A x quits)
#   vm.sh clean | distclean       remove built initramfs | the whole cache
#
# Environment:
#   ACCEL=tcg|kvm   tcg (default) or kvm (-cpu host,-arch-capabilities): kvm does NOT work on
#                   this host (nested kvm_pvm: emulation failures), see README.md
#   SMP=2 MEM=4G    guest vCPUs / RAM
#   TIMEOUT=600     host-side wall-clock limit (s) for the whole boot
#   BOOT_TIMEOUT=300 BOOT_TRIES=3  a guest whose script has not started this long after
#                   qemu began is powered off and booted again, up to BOOT_TRIES boots in all
#   SHARE_DIR=dir   host dir exported read-write over virtio-9p, mounted at /share in guest
#   EXTRA_DIR=dir   host dir copied into the per-run initramfs at /extra (no 9p needed)
#                   (ELF files in SHARE_DIR/bin and EXTRA_DIR/bin get any shared library the
#                   guest lacks copied into the per-run initramfs, from the host)
#   LOG=file        full console log (default: $CACHE/logs/run-<date>.log)
#   FABRIK_INTEROP_CACHE=dir  downloads, extracted packages, initramfs
#                   (default: ~/.cache/fabrik-interop, about 1 GB)
#   NO_APT=1        never call apt-get install/update (host deps must already be there)
#   REBUILD=1       force initramfs rebuild;  QEMU_EXTRA="..." extra qemu args
#   APPEND="..."    extra kernel command-line args
#   KERNEL_IMAGE=bzimage  boot the compressed bzImage instead of the extracted vmlinux (PVH)
#   KPKG=linux-image-...  another Debian kernel package (e.g. linux-image-6.12.100+deb12-amd64, which has
#                   NVMe in-band authentication and TLS); give it to every call, with its own
#                   FABRIK_INTEROP_CACHE (e.g. ~/.cache/fabrik-interop-612)
#   EXTRA_PKGS="..." EXTRA_MODULES="..."  more Debian packages / kernel modules in the guest (e.g. mdadm,
#                   raid456); use a FABRIK_INTEROP_CACHE of their own
#   TLSHD=1         tlshd (the kernel's TLS handshake daemon, ktls-utils) in the guest: Debian 12 has
#                   none, so Debian 13's, fetched from its pool (checked against its Packages index)
#                   with its libraries and its own glibc under /opt/tlshd; `tlshd` runs it
# Guest-side protocol: the script runs as root with cwd /, PATH set, configfs mounted,
# helper functions in /vmh/lib.sh (see guest-lib.sh), /extra/bin and /share/bin on PATH;
# its exit status is printed as "@@VMH_EXIT rc=N@@" and becomes vm.sh's exit status
# (255 if the marker never appeared, e.g. kernel panic or timeout).
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
CACHE=${FABRIK_INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fabrik-interop}
DEBS=$CACHE/debs
ROOT=$CACHE/root            # every .deb dpkg -x'ed here
IR=$CACHE/initramfs         # initramfs tree
IRCPIO=$CACHE/initramfs.cpio
ACCEL=${ACCEL:-tcg}
SMP=${SMP:-2}
MEM=${MEM:-4G}
TIMEOUT=${TIMEOUT:-600}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-300}
BOOT_TRIES=${BOOT_TRIES:-3}
ARCH_TRIPLET=x86_64-linux-gnu

# Userspace packages whose executables go into the guest (e2fsprogs: ext4 data dirs on a
# loop device, because tmpfs in 6.1 has no O_DIRECT).
TOOL_PKGS="busybox-static bash nvme-cli ibverbs-utils rdmacm-utils perftest fio iproute2 rdma-core e2fsprogs${EXTRA_PKGS:+ $EXTRA_PKGS}"
# Extra packages needed only for their files (providers, dlopen'ed libs).
FILE_PKGS="ibverbs-providers libibverbs1 librdmacm1 libnvme1"
# Headers + .so links for building our own verbs programs on the host against the
# guest's exact rdma-core (cache/root/usr/include, cache/root/usr/lib/x86_64-linux-gnu).
DEV_PKGS="libibverbs-dev librdmacm-dev"
# Kernel modules wanted in the guest (dependencies are added from modules.dep).
MODULES="configfs nvme-core nvme-fabrics nvme-tcp nvme-rdma nvme
 nvmet nvmet-tcp nvmet-rdma null_blk loop ext4
 ib_core ib_uverbs ib_umad rdma_cm rdma_ucm ib_cm iw_cm rdma_rxe
 veth dummy 9p 9pnet 9pnet_virtio virtio_pci virtio_blk
 crc32c_generic crc32c-intel crc32_generic crc32-pclmul crct10dif_pclmul af_packet tun${EXTRA_MODULES:+ $EXTRA_MODULES}"
# (Debian 6.1 has CONFIG_NVME_TARGET_LOOP and CONFIG_RDMA_SIW disabled: no nvme-loop, no siw)
# Modules only some kernels have, taken where they exist and skipped quietly elsewhere: in-band
# authentication (DH-HMAC-CHAP) and TLS of 6.12 (6.1 has no nvme-auth, nvme-keyring; the
# hmac/sha256/sha512/dh crypto they use is built into both kernels); the AEADs kTLS installs
# after tlshd's handshake (6.12 builds gcm, ccm and chacha20poly1305 as modules: without them
# the handshake ends in "The kernel does not support the requested algorithm").
OPT_MODULES="nvme-auth nvme-keyring tls gcm ghash-generic ghash-clmulni-intel aesni-intel cryptd ccm
 chacha20poly1305 chacha-generic poly1305-generic chacha-x86_64 poly1305-x86_64"

# tlshd and what it loads, from Debian 13 (GnuTLS >= 3.8.1 and glibc >= 2.38 are newer than 12's).
TLSHD_SUITE=trixie
TLSHD_PKGS="ktls-utils libc6 libgcc-s1 libgnutls30t64 libgmp10 libhogweed6t64 libnettle8t64 libidn2-0
 libunistring5 libp11-kit0 libffi8 libtasn1-6 libglib2.0-0t64 libatomic1 libmount1 libblkid1
 libselinux1 libpcre2-8-0 zlib1g libkeyutils1 libnl-3-200 libnl-genl-3-200"
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { printf '[vm.sh %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
BB() { "$ROOT/bin/busybox" "$@"; }

# ---------------------------------------------------------------- download
APT_UPDATED=
apt_update_once() {
  [ -n "$APT_UPDATED" ] && return 0
  APT_UPDATED=1
  log "apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || log "WARN: apt-get update failed"
}
apt_install() {  # pkgs...: install, with one apt-get update + retry if that fails
  [ -n "${NO_APT:-}" ] && die "missing host packages: $* (NO_APT is set)"
  local sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@" >&2 && return 0
  APT_UPDATED=; [ "$(id -u)" = 0 ] || die "cannot apt-get update without root"
  apt_update_once
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@" >&2 ||
    die "apt-get install $* failed"
}
host_deps() {
  local need=()
  command -v dpkg >/dev/null && command -v apt-get >/dev/null || die "dpkg/apt-get missing (Debian/Ubuntu host needed)"
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v readelf >/dev/null || need+=(binutils)
  command -v xz >/dev/null || need+=(xz-utils)
  command -v timeout >/dev/null || need+=(coreutils)
  echo x | grep -qP 'x' 2>/dev/null || need+=(grep)
  command -v awk >/dev/null || need+=(mawk)
  if ((${#need[@]})); then apt_install "${need[@]}"; fi
  # qemu-system-x86 ships no 9p helper needs; but the PVH/q35 firmware comes from seabios/qemu-system-data
  [ -e /usr/share/qemu/bios-256k.bin ] || [ -e /usr/share/seabios/bios-256k.bin ] || apt_install seabios qemu-system-data
}

download() {
  local stamp="${KPKG:-} $TOOL_PKGS $FILE_PKGS $DEV_PKGS"
  [ -e "$CACHE/.downloaded" ] && [ "$(cat "$CACHE/.downloaded")" = "$stamp" ] && return 0
  rm -f "$CACHE/.extracted"
  rm -rf "$DEBS"; mkdir -p "$DEBS"   # no stale versions next to new ones
  local kpkg libs
  apt-cache show linux-image-amd64 busybox-static nvme-cli >/dev/null 2>&1 || apt_update_once
  resolve_pkgs() {
    kpkg=${KPKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
    [ -n "$kpkg" ] || die "cannot resolve linux-image-amd64"
    # Library closure of the tool packages: all lib* packages in the Depends closure
    # (skipping perl/python/data packages).  Libraries actually copied into the guest
    # are later chosen by ELF NEEDED, so extra packages here cost only disk.
    libs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
             --no-breaks --no-replaces --no-enhances $TOOL_PKGS $FILE_PKGS $DEV_PKGS 2>/dev/null |
           grep -v '^ ' | grep -v '^<' | sort -u |
           grep -E '^(lib|zlib1g$)' | grep -vE -- '-perl$|^libpython|^libperl|-dev$|-bin$' || true)
  }
  get_pkgs() {
    log "downloading $kpkg + $(echo $TOOL_PKGS $FILE_PKGS $DEV_PKGS $libs | wc -w) userspace packages into $DEBS"
    # apt-get download as root warns about the unsandboxed _apt user; harmless
    (cd "$DEBS" && apt-get download "$kpkg" $TOOL_PKGS $FILE_PKGS $DEV_PKGS $libs >/dev/null 2>"$CACHE/download.err")
  }
  resolve_pkgs
  if ! get_pkgs; then   # stale package lists (superseded versions are gone from the mirror)
    grep -E '^E:' "$CACHE/download.err" | head -3 >&2
    log "apt-get download failed, retrying after apt-get update"
    APT_UPDATED=; apt_update_once; resolve_pkgs
    rm -rf "$DEBS"; mkdir -p "$DEBS"
    get_pkgs || { cat "$CACHE/download.err" >&2; die "apt-get download failed"; }
  fi
  echo "$kpkg" > "$CACHE/kpkg"
  echo "$stamp" > "$CACHE/.downloaded"
}

extract() {
  [ -e "$CACHE/.extracted" ] && return 0
  rm -rf "$ROOT"; mkdir -p "$ROOT"
  log "extracting $(ls "$DEBS"/*.deb | wc -l) .debs into $ROOT"
  local d
  for d in "$DEBS"/*.deb; do dpkg -x "$d" "$ROOT"; done
  # full modules.dep for the whole module tree (Debian generates it in postinst)
  local kver; kver=$(kver)
  BB depmod -b "$ROOT" "$kver"
  # Uncompressed ELF vmlinux for QEMU's PVH direct boot: skips the in-guest xz
  # decompression, which costs ~2.8 s per boot under TCG.
  local bz=$ROOT/boot/vmlinuz-$kver off
  rm -f "$CACHE/vmlinux"   # never boot a kernel left from another KPKG
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bz" | head -1 | cut -d: -f1 || true)
  if [ -n "$off" ]; then
    tail -c +$((off + 1)) "$bz" | xz -dc > "$CACHE/vmlinux" 2>/dev/null || true   # trailing data -> rc!=0
  else
    off=$(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$bz" | head -1 | cut -d: -f1 || true)   # zstd
    [ -n "$off" ] && { tail -c +$((off + 1)) "$bz" | zstd -qdc > "$CACHE/vmlinux" 2>/dev/null || true; }
  fi
  is_elf "$CACHE/vmlinux" || rm -f "$CACHE/vmlinux"
  touch "$CACHE/.extracted"
}

kver() {  # the kernel of the package prepare chose (KPKG), else the only one extracted
  local k; k=$(cat "$CACHE/kpkg" 2>/dev/null); k=${k#linux-image-}
  if [ -n "$k" ] && [ -d "$ROOT/lib/modules/$k" ]; then echo "$k"; else ls "$ROOT/lib/modules" | head -1; fi
}

# ---------------------------------------------------------------- initramfs
declare -A SEEN_LIB=()
LIBDIRS=""
find_lib() {  # soname [extra dirs...] -> path (staging first, then host as fallback)
  local so=$1 d; shift
  for d in "$@" $LIBDIRS; do [ -e "$d/$so" ] && { echo "$d/$so"; return 0; }; done
  for d in /lib/$ARCH_TRIPLET /usr/lib/$ARCH_TRIPLET /lib64; do
    [ -e "$d/$so" ] && { log "WARN: $so taken from host $d"; echo "$d/$so"; return 0; }
  done
  return 1
}
copy_real() {  # copy file (dereferencing symlinks inside staging root) to dest
  local src=$1 dst=$2 t n=0
  while [ -L "$src" ] && [ $n -lt 20 ]; do
    t=$(readlink "$src"); n=$((n+1))
    case $t in /*) if [ -e "$ROOT$t" ]; then src=$ROOT$t; else src=$t; fi ;;
               *) src=$(dirname "$src")/$t ;; esac
  done
  mkdir -p "$(dirname "$dst")"; cp -f "$src" "$dst"
}
add_elf_deps() {  # recursively copy NEEDED libs of ELF $1 (honours RUNPATH, e.g. ceph/)
  local so p rp extra=()
  local dyn; dyn=$(readelf -d "$1" 2>/dev/null) || return 0
  for rp in $(echo "$dyn" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p' | tr ':' ' '); do
    case $rp in /*) extra+=("$ROOT$rp") ;; esac
  done
  for so in $(echo "$dyn" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -n "${SEEN_LIB[$so]:-}" ] && continue
    SEEN_LIB[$so]=1
    if p=$(find_lib "$so" "${extra[@]}"); then
      copy_real "$p" "$IR/usr/lib/$ARCH_TRIPLET/$so"
      add_elf_deps "$IR/usr/lib/$ARCH_TRIPLET/$so"
    else
      log "WARN: library $so (needed by ${1#$IR}) not found"
    fi
  done
}
is_elf() { [ "$(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

build_initramfs() {
  local kver; kver=$(kver)
  # rebuild when vm.sh / guest-init / EXTRA_MODULES change (by content: a fresh clone's mtimes say nothing)
  local stamp; stamp=$({ cat "$HERE/vm.sh" "$HERE/guest-init" "$CACHE/.downloaded" "$CACHE/kpkg"; printf %s "${EXTRA_MODULES:-}" "${TLSHD:-}"; } 2>/dev/null | sha256sum | cut -c1-16)
  if [ -e "$IRCPIO" ] && [ -z "${REBUILD:-}" ] && [ "$(cat "$CACHE/initramfs.stamp" 2>/dev/null)" = "$stamp" ] \
     && [ "$IRCPIO" -nt "$CACHE/.extracted" ]; then
    return 0
  fi
  log "building initramfs for $kver"
  rm -rf "$IR"; mkdir -p "$IR"/usr/{bin,sbin,lib/$ARCH_TRIPLET,lib64} "$IR"/{dev,proc,sys,tmp,run,etc,root,share,extra,mnt,var/tmp}
  ln -s usr/bin "$IR/bin"; ln -s usr/sbin "$IR/sbin"; ln -s usr/lib "$IR/lib"; ln -s usr/lib64 "$IR/lib64"
  chmod 1777 "$IR/tmp" "$IR/var/tmp"
  LIBDIRS="$ROOT/lib/$ARCH_TRIPLET $ROOT/usr/lib/$ARCH_TRIPLET $ROOT/lib64 $ROOT/usr/lib64"
  # glibc dynamic loader
  copy_real "$ROOT/lib/$ARCH_TRIPLET/ld-linux-x86-64.so.2" "$IR/usr/lib/$ARCH_TRIPLET/ld-linux-x86-64.so.2"
  ln -s ../lib/$ARCH_TRIPLET/ld-linux-x86-64.so.2 "$IR/usr/lib64/ld-linux-x86-64.so.2"
  SEEN_LIB[ld-linux-x86-64.so.2]=1

  # busybox + applet links (real binaries copied below win over applets)
  cp "$ROOT/bin/busybox" "$IR/usr/bin/busybox"
  local a
  for a in $(BB --list-full); do
    a=usr/${a#usr/}
    [ -e "$IR/$a" ] || [ -L "$IR/$a" ] || ln -s /usr/bin/busybox "$IR/$a"
  done

  # executables of the tool packages (bin + sbin, usr-merged)
  local pkg f dst
  for pkg in $TOOL_PKGS; do
    [ "$pkg" = busybox-static ] && continue
    local deb; deb=$(ls "$DEBS"/${pkg}_*.deb | head -1)
    for f in $(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's#^\./#/#' | grep -E '^/(usr/)?s?bin/[^/]+$'); do
      [ -e "$ROOT$f" ] || [ -L "$ROOT$f" ] || continue
      case $f in */sbin/*) dst=$IR/usr/sbin/$(basename "$f") ;; *) dst=$IR/usr/bin/$(basename "$f") ;; esac
      rm -f "$dst"; copy_real "$ROOT$f" "$dst"; chmod +x "$dst"
      is_elf "$dst" && add_elf_deps "$dst"
    done
  done
  # config files
  cp -a "$ROOT/etc/iproute2" "$IR/etc/" 2>/dev/null || true
  mkdir -p "$IR/etc/libibverbs.d" "$IR/usr/lib/$ARCH_TRIPLET/libibverbs" "$IR/etc/nvme"
  # libibverbs provider for Soft-RoCE (rxe); siw kernel module is not built by Debian
  for p in rxe; do
    cp "$ROOT/etc/libibverbs.d/$p.driver" "$IR/etc/libibverbs.d/"
    copy_real "$ROOT/usr/lib/$ARCH_TRIPLET/libibverbs/lib$p-rdmav34.so" "$IR/usr/lib/$ARCH_TRIPLET/libibverbs/lib$p-rdmav34.so"
    add_elf_deps "$IR/usr/lib/$ARCH_TRIPLET/libibverbs/lib$p-rdmav34.so"
  done
  # make the guest usable for our own (dynamically linked) binaries: common libs
  for so in libgcc_s.so.1 libstdc++.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 libnss_files.so.2 libnss_dns.so.2 libutil.so.1; do
    [ -n "${SEEN_LIB[$so]:-}" ] && continue; SEEN_LIB[$so]=1
    p=$(find_lib $so) && { copy_real "$p" "$IR/usr/lib/$ARCH_TRIPLET/$so"; add_elf_deps "$IR/usr/lib/$ARCH_TRIPLET/$so"; }
  done
  # unversioned dev symlinks so Rust/C programs linked against -libverbs/-lrdmacm find them too
  (cd "$IR/usr/lib/$ARCH_TRIPLET" && ln -sf libibverbs.so.1 libibverbs.so && ln -sf librdmacm.so.1 librdmacm.so)

  # kernel modules: closure over the full modules.dep
  local mdir=$ROOT/lib/modules/$kver m path
  local -A want=()
  declare -A name2path=()
  while IFS=: read -r path _; do
    m=$(basename "$path"); m=${m%.xz}; m=${m%.zst}; m=${m%.ko}; m=${m//-/_}; name2path[$m]=$path
  done < "$mdir/modules.dep"
  for m in $MODULES $OPT_MODULES; do
    m=${m//-/_}
    path=${name2path[$m]:-}
    if [ -z "$path" ]; then
      grep -q "/${m}.ko\$\|/${m//_/-}.ko\$" "$mdir/modules.builtin" 2>/dev/null ||
        case " ${OPT_MODULES//-/_} " in *" $m "*) log "module $m not in $kver: skipped" ;; *) log "WARN: module $m not found" ;; esac
      continue
    fi
    want[$path]=1
  done
  local changed=1 d
  while [ $changed = 1 ]; do   # transitive closure (depmod output is already transitive; be safe)
    changed=0
    for path in "${!want[@]}"; do
      for d in $(grep "^$path:" "$mdir/modules.dep" | cut -d: -f2); do
        [ -n "${want[$d]:-}" ] || { want[$d]=1; changed=1; }
      done
    done
  done
  for path in "${!want[@]}"; do   # newer kernels ship modules compressed (.ko.xz): store them plain
    mkdir -p "$IR/usr/lib/modules/$kver/$(dirname "$path")"
    case $path in
      *.ko.xz) xz -dc "$mdir/$path" > "$IR/usr/lib/modules/$kver/${path%.xz}" ;;
      *.ko.zst) zstd -qdc "$mdir/$path" > "$IR/usr/lib/modules/$kver/${path%.zst}" ;;
      *) cp "$mdir/$path" "$IR/usr/lib/modules/$kver/$path" ;;
    esac
  done
  cp "$mdir"/modules.{order,builtin,builtin.modinfo} "$IR/usr/lib/modules/$kver/"
  sed -i 's/\.ko\.\(xz\|zst\)$/.ko/' "$IR/usr/lib/modules/$kver/modules.order"
  BB depmod -b "$IR" "$kver"

  # /etc basics
  printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$IR/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$IR/etc/group"
  printf '127.0.0.1 localhost guest\n::1 localhost\n' > "$IR/etc/hosts"
  printf 'passwd: files\ngroup: files\nhosts: files\n' > "$IR/etc/nsswitch.conf"
  echo "$kver" > "$IR/etc/vmh-kernel"
  cp "$HERE/guest-init" "$IR/init"; chmod +x "$IR/init"
  [ -n "${TLSHD:-}" ] && tlshd_install

  (cd "$IR" && find . | BB cpio -o -H newc > "$IRCPIO.tmp" 2>/dev/null) && mv "$IRCPIO.tmp" "$IRCPIO"
  echo "$stamp" > "$CACHE/initramfs.stamp"
  log "initramfs: $(du -sh "$IR" | cut -f1) tree, $(du -h "$IRCPIO" | cut -f1) cpio, $(find "$IR/usr/lib/modules" -name '*.ko' | wc -l) modules, $(ls "$IR/usr/lib/$ARCH_TRIPLET" | wc -l) libs"
}

# Debian 13's tlshd and its library closure in $CACHE/tlshd/root (each .deb's SHA256 checked
# against the suite's Packages index, fetched over the same mirror apt uses).
tlshd_fetch() {
  local dir=$CACHE/tlshd p line file sum
  [ -e "$dir/.done" ] && [ "$(cat "$dir/.done")" = "$TLSHD_PKGS" ] && return 0
  rm -rf "$dir"; mkdir -p "$dir/debs" "$dir/root"
  log "fetching tlshd (ktls-utils) and its libraries from Debian $TLSHD_SUITE"
  curl -fsSL "$DEBIAN_MIRROR/dists/$TLSHD_SUITE/main/binary-amd64/Packages.xz" | xz -dc > "$dir/Packages" ||
    die "cannot fetch Debian $TLSHD_SUITE's package index"
  for p in $TLSHD_PKGS; do
    line=$(awk -v p="$p" '$0 == "Package: " p {f=1} f && /^Filename:/ {fn=$2} f && /^SHA256:/ {print fn, $2; exit}' "$dir/Packages")
    [ -n "$line" ] || die "$p is not in Debian $TLSHD_SUITE"
    file=${line% *}; sum=${line#* }
    curl -fsSL -o "$dir/debs/$(basename "$file")" "$DEBIAN_MIRROR/$file" || die "cannot fetch $file"
    echo "$sum  $dir/debs/$(basename "$file")" | sha256sum -c --quiet - || die "$file: SHA256 mismatch"
    dpkg -x "$dir/debs/$(basename "$file")" "$dir/root"
  done
  [ -x "$dir/root/usr/sbin/tlshd" ] || die "ktls-utils has no /usr/sbin/tlshd"
  echo "$TLSHD_PKGS" > "$dir/.done"
}
# tlshd into the initramfs under /opt/tlshd with every library it needs from the same suite, its
# own loader included; /usr/sbin/tlshd starts it with them.
tlshd_install() {
  local src=$CACHE/tlshd/root dst=$IR/opt/tlshd so p todo seen=" "
  local ROOT=$src   # copy_real resolves absolute links inside the suite's tree
  mkdir -p "$dst/lib"
  cp "$src/usr/sbin/tlshd" "$dst/tlshd.bin"
  copy_real "$src/usr/lib/$ARCH_TRIPLET/ld-linux-x86-64.so.2" "$dst/lib/ld-linux-x86-64.so.2"
  todo="$dst/tlshd.bin"
  while [ -n "$todo" ]; do
    set -- $todo; todo=""
    for p in "$@"; do
      for so in $(readelf -d "$p" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        case $seen in *" $so "*) continue ;; esac
        seen="$seen$so "
        [ -e "$src/usr/lib/$ARCH_TRIPLET/$so" ] || die "tlshd needs $so: not in the $TLSHD_SUITE packages"
        copy_real "$src/usr/lib/$ARCH_TRIPLET/$so" "$dst/lib/$so"
        todo="$todo $dst/lib/$so"
      done
    done
  done
  # glibc loads libgcc_s at run time (thread cancellation)
  copy_real "$src/usr/lib/$ARCH_TRIPLET/libgcc_s.so.1" "$dst/lib/libgcc_s.so.1"
  printf '#!/bin/sh\nexec /opt/tlshd/lib/ld-linux-x86-64.so.2 --library-path /opt/tlshd/lib /opt/tlshd/tlshd.bin "$@"\n' > "$IR/usr/sbin/tlshd"
  chmod +x "$IR/usr/sbin/tlshd"
}

prepare() {
  local t0=$SECONDS
  host_deps; download; extract
  [ -n "${TLSHD:-}" ] && tlshd_fetch
  build_initramfs
  log "prepare done in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- boot
add_run_libs() {  # ELF $1 (a binary going to the guest via SHARE_DIR/EXTRA_DIR) -> missing libs into $tmp/r
  local so p dyn
  dyn=$(readelf -d "$1" 2>/dev/null) || return 0
  for so in $(echo "$dyn" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -e "$IR/usr/lib/$ARCH_TRIPLET/$so" ] || [ -e "$tmp/r/usr/lib/$ARCH_TRIPLET/$so" ] && continue
    LIBDIRS="$ROOT/lib/$ARCH_TRIPLET $ROOT/usr/lib/$ARCH_TRIPLET"
    if p=$(find_lib "$so"); then
      log "guest lacks $so (needed by $(basename "$1")): adding $p to this run's initrd"
      copy_real "$p" "$tmp/r/usr/lib/$ARCH_TRIPLET/$so"
      add_run_libs "$tmp/r/usr/lib/$ARCH_TRIPLET/$so"
    else
      log "WARN: library $so (needed by $1) not found anywhere"
    fi
  done
}
# One boot, its console appended to $1 (line by line: `tr` alone holds a pipe's output back
# in 4 KiB blocks). A TCG guest once hung before it reached its script (no console output in
# 1200 s, qemu busy) and the next boot took 4 s: a boot whose script has not started within
# BOOT_TIMEOUT is powered off here and reported as 200, for another try.
boot_once() {  # $1 = log, $2 = kernel command line, rest = qemu args
  local logf=$1 append=$2; shift 2
  local pidf="$tmp/qemu.pid" waited=0 qpid
  rm -f "$pidf"
  set +e
  (
    timeout --foreground -k 5 "$TIMEOUT" qemu-system-x86_64 "$@" -pidfile "$pidf" \
      -serial stdio -append "$append" </dev/null 2>&1 | stdbuf -oL tr -d '\r' | tee -a "$logf"
    exit "${PIPESTATUS[0]}"
  ) &
  local pipe=$!
  while kill -0 "$pipe" 2>/dev/null && ! grep -aq '@@VMH_SCRIPT_START' "$logf"; do
    if [ "$waited" -ge "$BOOT_TIMEOUT" ]; then
      qpid=$(cat "$pidf" 2>/dev/null)
      [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
      wait "$pipe"
      set -e
      return 200
    fi
    sleep 1; waited=$((waited + 1))
  done
  wait "$pipe"
  local rc=$?
  set -e
  return "$rc"
}

boot() {  # $1 = mode (run|shell), rest = script + args
  local mode=$1; shift
  prepare
  local kver; kver=$(kver)
  tmp=$(mktemp -d "$CACHE/run.XXXXXX")   # global: used by the EXIT trap
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/r/vmh" "$tmp/r/extra"
  cp "$HERE/guest-lib.sh" "$tmp/r/vmh/lib.sh"
  cp "$HERE"/*-lib.sh "$tmp/r/vmh/"     # nvmf-suite-lib.sh etc.: /vmh/<name>
  if [ "$mode" = run ]; then
    [ $# -ge 1 ] || die "usage: vm.sh run SCRIPT [ARGS...]"
    local script=$1; shift
    [ -f "$script" ] || die "guest script $script not found"
    cp "$script" "$tmp/r/vmh/guest.sh"; chmod +x "$tmp/r/vmh/guest.sh"
    : > "$tmp/r/vmh/args"; local a
    for a in "$@"; do printf '%s\n' "$a" >> "$tmp/r/vmh/args"; done
  fi
  [ -n "${EXTRA_DIR:-}" ] && cp -a "$EXTRA_DIR"/. "$tmp/r/extra/"
  local f
  for f in "$tmp/r/extra/bin"/* ${SHARE_DIR:+"$SHARE_DIR"/bin/*}; do
    [ -f "$f" ] && is_elf "$f" && add_run_libs "$f"
  done
  (cd "$tmp/r" && find . | BB cpio -o -H newc > "$tmp/run.cpio" 2>/dev/null)
  cat "$IRCPIO" "$tmp/run.cpio" > "$tmp/initrd.cpio"

  local append="console=ttyS0 panic=-1 quiet loglevel=4 vmh.mode=$mode ${APPEND:-}"
  local kimg=$ROOT/boot/vmlinuz-$kver
  [ -e "$CACHE/vmlinux" ] && [ "${KERNEL_IMAGE:-}" != bzimage ] && kimg=$CACHE/vmlinux
  local qargs=(-nodefaults -no-user-config -display none -no-reboot -nic none
               -smp "$SMP" -m "$MEM" -kernel "$kimg" -initrd "$tmp/initrd.cpio")
  case $ACCEL in
    kvm) qargs+=(-machine q35,accel=kvm -cpu host,-arch-capabilities) ;;
    tcg) qargs+=(-machine q35 -accel tcg,thread=multi -cpu max) ;;
    *) die "ACCEL must be tcg or kvm" ;;
  esac
  if [ -n "${SHARE_DIR:-}" ]; then
    mkdir -p "$SHARE_DIR"
    qargs+=(-virtfs "local,path=$(readlink -f "$SHARE_DIR"),mount_tag=vmhshare,security_model=none,id=vmhshare")
    append+=" vmh.share=1"
  fi
  # shellcheck disable=SC2206
  qargs+=(${QEMU_EXTRA:-})
  if [ "$mode" = shell ]; then
    exec qemu-system-x86_64 "${qargs[@]}" -serial mon:stdio -append "$append"
  fi
  mkdir -p "$CACHE/logs"
  local logf=${LOG:-$CACHE/logs/run-$(date +%Y%m%d-%H%M%S).log}
  log "booting ($ACCEL, $SMP vCPU, $MEM) $(basename "$kimg") $kver, log: $logf"
  local t0; t0=$(date +%s.%N)
  local try qrc
  : > "$logf"
  for try in $(seq 1 "$BOOT_TRIES"); do
    boot_once "$logf" "$append" "${qargs[@]}" && qrc=0 || qrc=$?
    [ "$qrc" = 200 ] || break
    log "guest script not started ${BOOT_TIMEOUT}s into boot $try of $BOOT_TRIES: powered off"
  done
  local t1; t1=$(date +%s.%N)
  local rc
  rc=$(grep -ao '@@VMH_EXIT rc=[0-9]*@@' "$logf" | tail -1 | sed 's/.*rc=\([0-9]*\)@@/\1/' || true)
  local boot_s; boot_s=$(grep -ao '@@VMH_SCRIPT_START uptime=[0-9.]*@@' "$logf" | head -1 | sed 's/.*uptime=\([0-9.]*\)@@/\1/' || true)
  log "qemu exit $qrc, wall $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')s, guest uptime at script start ${boot_s:-?}s, guest script rc=${rc:-MISSING}"
  [ "$qrc" = 124 ] && log "TIMEOUT after ${TIMEOUT}s"
  [ "$qrc" = 200 ] && log "no boot reached the guest script in $BOOT_TRIES tries"
  [ -n "$rc" ] || exit 255
  exit "$rc"
}

cmd=${1:-run}; shift || true
case $cmd in
  deps) host_deps ;;
  prepare) prepare ;;
  run) boot run "$@" ;;
  shell) boot shell ;;
  clean) rm -rf "$IR" "$IRCPIO" ;;
  distclean) rm -rf "$CACHE" ;;
  *) sed -n '2,42p' "$0"; exit 2 ;;
esac
