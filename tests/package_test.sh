#!/usr/bin/env bash
# libgpumem's ABI (scripts/abi-check), then the Debian packages (cmake/packaging.cmake), as an
# operator gets them. The make part builds them with cpack from the build and checks them with
# lintian (any E: fails) and by their contents (dpkg-deb -c). The install part, as root on Debian,
# installs them for real: the maintainer scripts make the user, the folders and the enabled units;
# the packaged gpumemd runs with the packaged configuration as the user gpumemd (socket in a
# temporary folder: no systemd runs here); the packaged gpumemctl, Python package, and programs
# built against libgpumem-dev (find_package; pkg-config, static and shared, in C) talk to it; then
# everything is purged. Without root or dpkg the install is skipped, with the reason.
# Run by CTest as two tests: package_test.sh BUILD_DIR SOURCE_DIR WORK_DIR make|install (or all).
# The make part runs beside other tests; the install part, which changes /usr and /etc, runs alone,
# on the packages the make part left in WORK_DIR.
set -euo pipefail
build=$1 source=$2 work=$3 part=${4:-all}
skip() {
  echo "SKIPPED: $*"
  exit 0
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}

make_packages() {
  # Emptied first: the install part installs what it finds here, never an earlier run's.
  rm -rf "$work"
  mkdir -p "$work"
  for tool in cpack dpkg-deb dpkg-shlibdeps lintian; do
    command -v "$tool" >/dev/null ||
      skip "$tool is not installed (scripts/install-deps installs it)"
  done

  # The library's ABI against the last release's (abi/libgpumem.abi): abidiff, a few seconds.
  if command -v abidiff >/dev/null; then
    echo "== scripts/abi-check"
    "$source/scripts/abi-check" "$build/client/libgpumem.so"
  else
    echo "== scripts/abi-check: not run, abigail-tools is not installed"
  fi

  echo "== cpack -G DEB"
  cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/packages" >"$work/cpack.log" 2>&1 ||
    { cat "$work/cpack.log"; fail "cpack"; }
  debs=("$work"/packages/*.deb)
  packages=()
  for deb in "${debs[@]}"; do
    packages+=("$(dpkg-deb -f "$deb" Package)")
    echo "$(basename "$deb"): Depends: $(dpkg-deb -f "$deb" Depends)"
  done

  echo "== lintian"
  lintian --tag-display-limit 0 "${debs[@]}" >"$work/lintian.log" 2>&1 || true
  grep -E '^[EW]: ' "$work/lintian.log" || true
  if grep -q '^E: ' "$work/lintian.log"; then
    fail "lintian reports errors"
  fi

  echo "== contents"
  contents() { dpkg-deb -c "$work/packages/$1"_*.deb | awk '{print $6}'; }
  expect() {
    local package=$1
    shift
    local listing
    listing=$(contents "$package")
    for path in "$@"; do
      grep -qxF "./$path" <<<"$listing" || fail "$package lacks /$path"
    done
  }
  expect gpumemd usr/bin/gpumemd usr/bin/gpumemctl etc/gpumemd/gpumemd.yaml \
    usr/lib/systemd/system/gpumemd.service usr/lib/systemd/system/gpumemd.socket \
    usr/lib/sysusers.d/gpumemd.conf usr/lib/tmpfiles.d/gpumemd.conf \
    usr/share/doc/gpumemd/copyright usr/share/doc/gpumemd/changelog.Debian.gz \
    usr/share/doc/gpumemd/README.md usr/share/gpumem/metrics-http.conf
  for page in "$source"/man/*.[0-9]; do
    [ -e "$page" ] || continue
    name=$(basename "$page")
    expect gpumemd "usr/share/man/man${name##*.}/$name.gz"
  done
  dpkg-deb -I "$work"/packages/gpumemd_*.deb conffiles | grep -qx /etc/gpumemd/gpumemd.yaml ||
    fail "gpumemd.yaml is not a conffile"
  expect libgpumem0 usr/lib/libgpumem.so.0.1.0
  dpkg-deb -I "$work"/packages/libgpumem0_*.deb shlibs | grep -q '^libgpumem 0 libgpumem0 ' ||
    fail "libgpumem0 has no shlibs entry for libgpumem.so.0"
  expect libgpumem-dev usr/include/gpumem/gpumem.h usr/include/gpumem/export.h \
    usr/include/gpumem/gpumem.hpp usr/lib/libgpumem.a usr/lib/pkgconfig/gpumem.pc \
    usr/lib/cmake/gpumem/gpumemConfig.cmake
  # Each program and library from elsewhere than the package that should have it is a mistake.
  if contents libgpumem-dev | grep -q 'libgpumem\.so\.0'; then
    fail "libgpumem-dev has the runtime"
  fi
  dpkg-deb --fsys-tarfile "$work"/packages/gpumemd_*.deb |
    tar -xO ./usr/lib/systemd/system/gpumemd.service >"$work/gpumemd.service"
  grep -q '^ExecStart=/usr/bin/gpumemd --config /etc/gpumemd/gpumemd.yaml ' \
    "$work/gpumemd.service" ||
    fail "the packaged unit does not start /usr/bin/gpumemd with /etc/gpumemd/gpumemd.yaml"
  echo "contents: as expected"
}

install_packages() {
  if [ "$(id -u)" -ne 0 ]; then skip "installing the packages needs root"; fi
  if [ ! -r /etc/debian_version ] || ! command -v dpkg >/dev/null; then
    skip "installing the packages needs Debian's dpkg"
  fi
  debs=("$work"/packages/*.deb)
  [ -e "${debs[0]}" ] ||
    skip "no packages in $work/packages: the make part did not run, or skipped"
  packages=()
  for deb in "${debs[@]}"; do packages+=("$(dpkg-deb -f "$deb" Package)"); done
  for tool in setpriv flock pkg-config cc; do
    command -v "$tool" >/dev/null || skip "installing the packages: $tool is missing"
  done
  # One installation at a time on this machine (another build's run of this test waits).
  exec 9>/run/lock/gpumem-package-test.lock
  flock 9
  for package in "${packages[@]}"; do
    if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q installed; then
      skip "$package is installed on this machine already: this test installs and purges its own"
    fi
  done

  daemon_pid=
  cleanup() {
    [ -z "$daemon_pid" ] || kill "$daemon_pid" 2>/dev/null || true
    dpkg --purge "${packages[@]}" >"$work/purge.log" 2>&1 || cat "$work/purge.log"
  }
  trap cleanup EXIT

  echo "== dpkg -i"
  dpkg -i "${debs[@]}" 2>&1 | tee "$work/install.log"
  getent passwd gpumemd >/dev/null || fail "postinst made no user gpumemd"
  getent group gpumem >/dev/null || fail "postinst made no group gpumem"
  [ "$(stat -c '%U:%G %a' /etc/gpumemd)" = "root:gpumem 750" ] ||
    fail "/etc/gpumemd is $(stat -c '%U:%G %a' /etc/gpumemd), not root:gpumem 750"
  [ -L /etc/systemd/system/sockets.target.wants/gpumemd.socket ] ||
    fail "postinst did not enable gpumemd.socket"
  [ -L /etc/systemd/system/multi-user.target.wants/gpumemd.service ] ||
    fail "postinst did not enable gpumemd.service"
  if command -v systemd-analyze >/dev/null; then
    systemd-analyze security --offline=true --no-pager /usr/lib/systemd/system/gpumemd.service |
      tail -1
  fi

  echo "== the packaged gpumemd with the packaged configuration, as user gpumemd"
  /usr/bin/gpumemd --check-config --config /etc/gpumemd/gpumemd.yaml
  run_dir=$(mktemp -d "$work/run.XXXXXX")
  chown gpumemd:gpumem "$run_dir"
  chmod 0750 "$run_dir"
  socket=$run_dir/gpumemd.sock
  setpriv --reuid=gpumemd --regid=gpumem --init-groups -- /usr/bin/gpumemd \
    --config /etc/gpumemd/gpumemd.yaml --socket "$socket" --socket-mode 0660 \
    2>"$work/gpumemd.log" &
  daemon_pid=$!
  for _ in $(seq 100); do
    /usr/bin/gpumemctl --socket "$socket" ping >/dev/null 2>&1 && break
    kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/gpumemd.log"; fail "gpumemd exited"; }
    sleep 0.1
  done
  /usr/bin/gpumemctl --socket "$socket" ping
  /usr/bin/gpumemctl --socket "$socket" stats
  [ "$(stat -c %U "$socket")" = gpumemd ] || fail "the socket does not belong to gpumemd"

  echo "== programs built against libgpumem-dev"
  cmake -S "$source/tests/install_consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
    >"$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; fail "find_package(gpumem)"; }
  cmake --build "$work/consumer" --target consumer >>"$work/consumer.log" 2>&1 ||
    { cat "$work/consumer.log"; fail "building the find_package consumer"; }
  "$work/consumer/consumer"
  # The inline Lock::lock() and unlock() read a Lock::state that libgpumem 0.1.0 lacks: a program
  # using them must ask for the node that says so, and so refuse to load with 0.1.0.
  objdump -T "$work/consumer/consumer" | grep -q "GPUMEM_0\\.2.*unlock_contended" ||
    fail "a program using Lock does not ask for libgpumem's GPUMEM_0.2 node"
  read -ra shared_flags <<<"$(pkg-config --cflags --libs gpumem)"
  cc -std=c11 "$source/tests/install_consumer/consumer.c" "${shared_flags[@]}" -o "$work/c_shared"
  "$work/c_shared" "$socket"
  static_flags=$(pkg-config --static --cflags --libs gpumem)
  read -ra static_flags <<<"${static_flags/-lgpumem/-l:libgpumem.a}"
  cc -std=c11 "$source/tests/install_consumer/consumer.c" "${static_flags[@]}" -o "$work/c_static"
  "$work/c_static" "$socket"
  if dpkg-query -W python3-gpumem >/dev/null 2>&1; then
    /usr/bin/python3 -c "import gpumem, sys; gpumem.connect(sys.argv[1]).ping(); print('python3-gpumem: ping')" \
      "$socket"
  fi

  kill -TERM "$daemon_pid"
  wait "$daemon_pid" || fail "gpumemd exited with status $? on SIGTERM"
  daemon_pid=

  echo "== dpkg --purge"
  trap - EXIT
  dpkg --purge "${packages[@]}"
  for gone in /usr/bin/gpumemd /etc/gpumemd /usr/lib/systemd/system/gpumemd.service \
    /etc/systemd/system/multi-user.target.wants/gpumemd.service /usr/lib/libgpumem.so.0; do
    [ ! -e "$gone" ] || fail "$gone is left after the purge"
  done
  echo "installed, ran and purged: ${packages[*]}"
}

case "$part" in
  make) make_packages ;;
  install) install_packages ;;
  all)
    make_packages
    install_packages
    ;;
  *) fail "unknown part $part: make, install or all" ;;
esac
