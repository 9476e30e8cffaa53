#!/usr/bin/env bash
# A free-threaded CPython (3.14t, no GIL) for structgen's thread tests and batch benchmarks:
# built from Debian's source tarball of CPython (the package registries are what this project
# may reach; python.org is not), pinned by version and sha256, into $1 (default .python-ft).
# About five minutes on two cores; done once.
set -euo pipefail
PREFIX="$(realpath -m "${1:-.python-ft}")"
VERSION=3.14.7
SHA256=3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81
URL="http://deb.debian.org/debian/pool/main/p/python3.14/python3.14_${VERSION}.orig.tar.xz"
if [ -x "$PREFIX/bin/python3.14t" ]; then
  echo "$PREFIX/bin/python3.14t"
  exit 0
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
curl -fsSL -o "$WORK/src.tar.xz" "$URL" || {
  echo "cannot fetch $URL (Debian's pool keeps a few versions: pick a current one)" >&2
  exit 1
}
echo "$SHA256  $WORK/src.tar.xz" | sha256sum -c --quiet -
tar -xf "$WORK/src.tar.xz" -C "$WORK"
cd "$WORK/Python-${VERSION}"
./configure --disable-gil --prefix="$PREFIX" >"$WORK/configure.log" 2>&1 \
  || { tail -20 "$WORK/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$WORK/make.log" 2>&1 || { tail -20 "$WORK/make.log" >&2; exit 1; }
make install >"$WORK/install.log" 2>&1 || { tail -20 "$WORK/install.log" >&2; exit 1; }
echo "$PREFIX/bin/python3.14t"
