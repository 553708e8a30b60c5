#!/usr/bin/env bash
# Builds the WASI toolset of the `toolset` backend (and the test modules) into wasm/build/:
#   toybox.wasm   toybox (0BSD) multicall: ls cat grep sed sort uniq wc head tail cut tr find ...
#   awk.wasm      original-awk, the one true awk (MIT-style licence)
#   toolset.json  which command runs which module, and the sources they came from
#   licences/     the licence texts of what the modules contain (toybox, original-awk, and wasi-libc
#                 and compiler-rt, linked in), shipped with them in the npm package
#   test/*.wasm   small modules for the tests (hello, spin, bigmem)
# Sources are Debian bookworm source packages (wasm/sources.list), fetched with apt and checked
# against the SHA256 in Debian's .dsc; our changes are wasm/patches/*.patch and wasm/compat/.
# Needs Debian bookworm. As root it installs what it lacks (clang-14 lld-14 wasi-libc
# libclang-rt-14-dev-wasm32 byacc make gcc) and adds a deb-src entry; otherwise install them first.
#   bash wasm/build.sh            build (kept if wasm/build is up to date)
#   FORCE=1 bash wasm/build.sh    rebuild from scratch
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$HERE/build"
WORK="$OUT/work"
MAX_MEMORY=$((256 * 1024 * 1024))
STACK=$((1024 * 1024))
JOBS="$(nproc 2>/dev/null || echo 2)"

# The toybox commands we build (the everyday text and file tools; no shell, no processes).
TOYBOX_TOOLS="ls cat grep egrep fgrep sed sort uniq wc head tail cut tr find echo mkdir rm cp mv
  test dirname basename chmod printf seq tee true false touch pwd ln rmdir nl paste rev cmp od
  base64 md5sum sha1sum diff split stat du fold expand tac comm expr realpath readlink truncate
  cksum yes"

log() { printf 'wasm/build.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

if [ -z "${FORCE:-}" ] && [ -f "$OUT/toolset.json" ] && [ -f "$OUT/toybox.wasm" ] && [ -f "$OUT/awk.wasm" ] &&
  [ -z "$(find "$HERE/build.sh" "$HERE/sources.list" "$HERE/patches" "$HERE/compat" "$HERE/test" -newer "$OUT/toolset.json" -type f)" ]; then
  log "up to date ($OUT)"
  exit 0
fi

version_of() { awk -v p="$1" '$1 == p { print $2 }' "$HERE/sources.list"; }
licence_of() { awk -v p="$1" '$1 == p { $1 = ""; $2 = ""; sub(/^ +/, ""); print }' "$HERE/sources.list"; }

# --- toolchain ------------------------------------------------------------------------------------
need_packages=()
for pair in clang-14:/usr/bin/clang-14 lld-14:/usr/bin/wasm-ld-14 wasi-libc:/usr/lib/wasm32-wasi/libc.a \
  libclang-rt-14-dev-wasm32:/usr/lib/llvm-14/lib/clang/14.0.6/lib/wasi/libclang_rt.builtins-wasm32.a \
  byacc:/usr/bin/byacc make:/usr/bin/make gcc:/usr/bin/gcc xz-utils:/usr/bin/xz; do
  [ -e "${pair#*:}" ] || need_packages+=("${pair%%:*}")
done
have_deb_src() { grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; }
if [ "${#need_packages[@]}" -gt 0 ] || ! have_deb_src; then
  [ "$(id -u)" = 0 ] || die "run as root, or install ${need_packages[*]:-nothing} and add a deb-src entry for bookworm yourself"
  if ! have_deb_src; then
    log "adding a deb-src entry for bookworm"
    cat > /etc/apt/sources.list.d/kilntainers-deb-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  fi
  log "apt-get update; installing: ${need_packages[*]:-(nothing)}"
  apt-get update -qq
  [ "${#need_packages[@]}" -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_packages[@]}" >/dev/null
fi

WASI_CC=(clang-14 --target=wasm32-wasi --sysroot=/ -I"$HERE/compat/include" -I/usr/include/wasm32-wasi
  -D_WASI_EMULATED_SIGNAL -D_WASI_EMULATED_MMAN -D_WASI_EMULATED_PROCESS_CLOCKS -D_WASI_EMULATED_GETPID -D_GNU_SOURCE)
WASI_LIBS=(-L/usr/lib/wasm32-wasi -lm -lwasi-emulated-signal -lwasi-emulated-mman -lwasi-emulated-process-clocks
  -lwasi-emulated-getpid)
# Every module declares a maximum memory, so the backend can check it against --wasm-max-memory.
WASI_LINK=(-Wl,--gc-sections -Wl,--max-memory=$MAX_MEMORY -Wl,-z,stack-size=$STACK -Wl,--strip-debug)

rm -rf "$OUT"
mkdir -p "$WORK" "$OUT/test" "$OUT/licences"

# --- sources: the .orig tarball of each Debian source package, checked against Debian's SHA256 ------
fetch_orig() { # package version -> path of the tarball
  local package="$1" version="$2" line uri name hash
  line="$(cd "$WORK" && apt-get source --print-uris "$package=$version" 2>/dev/null | grep -E "^'.*\.orig\.tar\.[a-z]+' " | head -n 1)" ||
    die "apt cannot find the source package $package $version (is a bookworm deb-src entry configured?)"
  uri="$(printf '%s' "$line" | awk '{ print $1 }' | tr -d "'")"
  name="$(printf '%s' "$line" | awk '{ print $2 }')"
  hash="$(printf '%s' "$line" | awk '{ print $4 }')"
  [ -n "$uri" ] && [ -n "$hash" ] || die "no .orig tarball listed for $package $version"
  /usr/lib/apt/apt-helper download-file "$uri" "$WORK/$name" "$hash" >/dev/null ||
    die "cannot download $uri"
  printf '%s\n' "$WORK/$name"
}

TOYBOX_VERSION="$(version_of toybox)"
AWK_VERSION="$(version_of original-awk)"
log "fetching toybox $TOYBOX_VERSION and original-awk $AWK_VERSION (Debian source packages)"
toybox_tar="$(fetch_orig toybox "$TOYBOX_VERSION")"
awk_tar="$(fetch_orig original-awk "$AWK_VERSION")"

# --- toybox ---------------------------------------------------------------------------------------
mkdir -p "$WORK/toybox" && tar -xf "$toybox_tar" -C "$WORK/toybox" --strip-components=1
cd "$WORK/toybox"
cp LICENSE "$OUT/licences/toybox.LICENSE"
for patch in "$HERE"/patches/toybox-*.patch; do patch -s -p1 < "$patch"; done
for tool in $TOYBOX_TOOLS toybox; do echo "CONFIG_$(echo "$tool" | tr a-z A-Z)=y"; done > mini.config
printf 'CONFIG_SORT_FLOAT=y\nCONFIG_TOYBOX_FLOAT=y\n' >> mini.config
make -s allnoconfig KCONFIG_ALLCONFIG=mini.config HOSTCC=gcc >/dev/null 2>&1 || die "toybox: make allnoconfig failed"
# No fork in WASI (and no vfork either: those paths fail with ENOSYS at run time).
sed -i 's/^CONFIG_TOYBOX_FORK=y/# CONFIG_TOYBOX_FORK is not set/' .config
# Generate the headers (flags, globals, help) with the host compiler; compile for wasm32 below.
NOBUILD=1 CC=gcc HOSTCC=gcc bash scripts/make.sh >/dev/null 2>&1 || die "toybox: generating headers failed"
selected="$(sed -n 's/^CONFIG_\([^=]*\)=y/\1/p' .config | tr 'A-Z\n' 'a-z|')"
toy_files="$(grep -El "TOY[(](${selected%|})[ ,]" toys/*/*.c | xargs)"
lib_files="lib/args.c lib/commas.c lib/deflate.c lib/dirtree.c lib/env.c lib/lib.c lib/llist.c lib/portability.c lib/tty.c lib/utf8.c lib/xwrap.c"
mkdir -p obj
log "compiling toybox for wasm32-wasi ($(echo $toy_files | wc -w) command files)"
printf '%s\n' main.c $lib_files $toy_files "$HERE/compat/compat.c" |
  xargs -P "$JOBS" -I{} sh -c 'f="$1"; shift; o="obj/$(echo "$f" | tr / _ | sed "s/\.c$//").o"; "$@" -I . -Os -w -c "$f" -o "$o"' _ {} "${WASI_CC[@]}" ||
  die "toybox: compiling failed"
"${WASI_CC[@]}" obj/*.o "${WASI_LIBS[@]}" "${WASI_LINK[@]}" -o "$OUT/toybox.wasm" || die "toybox: linking failed"
# The commands of the multicall binary ("[" is toybox's other name for test).
toybox_commands="$(printf '%s\n' $TOYBOX_TOOLS "[" | sort -u)"

# --- original-awk ---------------------------------------------------------------------------------
mkdir -p "$WORK/awk" && tar -xf "$awk_tar" -C "$WORK/awk" --strip-components=1
cd "$WORK/awk"
cp LICENSE "$OUT/licences/original-awk.LICENSE"
byacc -d -b awkgram awkgram.y 2>/dev/null
gcc maketab.c -o maketab && ./maketab awkgram.tab.h > proctab.c
log "compiling original-awk for wasm32-wasi"
"${WASI_CC[@]}" -O2 -w awkgram.tab.c b.c main.c parse.c proctab.c tran.c lib.c run.c lex.c "$HERE/compat/compat.c" \
  "${WASI_LIBS[@]}" "${WASI_LINK[@]}" -o "$OUT/awk.wasm" || die "original-awk: build failed"

# --- test modules ---------------------------------------------------------------------------------
cd "$HERE/test"
"${WASI_CC[@]}" -O2 hello.c "${WASI_LIBS[@]}" "${WASI_LINK[@]}" -o "$OUT/test/hello.wasm"
"${WASI_CC[@]}" -O1 spin.c "${WASI_LIBS[@]}" "${WASI_LINK[@]}" -o "$OUT/test/spin.wasm"
# bigmem declares 1 GiB (over the default 256 MiB cap) and no maximum at all: both must be handled.
"${WASI_CC[@]}" -O2 bigmem.c "${WASI_LIBS[@]}" -Wl,--max-memory=1073741824 -o "$OUT/test/bigmem.wasm"
"${WASI_CC[@]}" -O2 bigmem.c "${WASI_LIBS[@]}" -o "$OUT/test/nomax.wasm"

# The C library and compiler runtime linked into every module: Debian's record of their licences.
cp /usr/share/doc/wasi-libc/copyright "$OUT/licences/wasi-libc.copyright"
cp /usr/share/doc/libclang-rt-14-dev-wasm32/copyright "$OUT/licences/compiler-rt.copyright"

# --- manifest ---------------------------------------------------------------------------------------
{
  printf '{\n  "modules": {\n'
  printf '    "toybox.wasm": [%s],\n' "$(printf '"%s",' $toybox_commands | sed 's/,$//')"
  printf '    "awk.wasm": ["awk"]\n  },\n'
  printf '  "sources": [\n'
  printf '    {"package": "toybox", "version": "%s", "licence": "%s", "licenceFile": "licences/toybox.LICENSE"},\n' "$TOYBOX_VERSION" "$(licence_of toybox)"
  printf '    {"package": "original-awk", "version": "%s", "licence": "%s", "licenceFile": "licences/original-awk.LICENSE"},\n' "$AWK_VERSION" "$(licence_of original-awk)"
  printf '    {"package": "wasi-libc", "version": "%s", "licence": "linked in; see its file", "licenceFile": "licences/wasi-libc.copyright"},\n' "$(dpkg-query -W -f '${Version}' wasi-libc)"
  printf '    {"package": "libclang-rt-14-dev-wasm32", "version": "%s", "licence": "linked in; see its file", "licenceFile": "licences/compiler-rt.copyright"}\n' "$(dpkg-query -W -f '${Version}' libclang-rt-14-dev-wasm32)"
  printf '  ],\n  "maxMemoryBytes": %d\n}\n' "$MAX_MEMORY"
} > "$OUT/toolset.json.tmp"
rm -rf "$WORK"
mv "$OUT/toolset.json.tmp" "$OUT/toolset.json"
log "built $(ls "$OUT"/*.wasm | wc -l) toolset modules and $(ls "$OUT"/test/*.wasm | wc -l) test modules in $OUT"
