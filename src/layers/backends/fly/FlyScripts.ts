/**
 * The shell programs the Fly backend runs inside a machine.
 *
 * The Machines exec call (`POST /machines/{id}/exec`) runs one argv to completion and answers
 * `{stdout, stderr, exit_code}`: no streaming, no TTY, no cwd, no env, no incremental stdin, and
 * nothing public says what flyd does with processes an exec leaves behind. So no process of ours
 * is a child of an exec call:
 *
 * - SUPERVISOR is the machine's main process (`config.init.exec`, installed at SUPERVISOR_PATH by
 *   `config.files` when the machine is created). It reads process directories from a FIFO and
 *   starts each one's RUNNER as its own child, in a new session (the process group that signals
 *   go to). A subshell per process waits for the runner and records its status (`rstatus`), so a
 *   runner killed with its group is a fact, not a guess. When the supervisor ends, the machine's
 *   main process ended: the machine stops, and every process with it.
 * - ROUND is the one exec call per poll: it applies queued actions (start, stdin, EOF, signal,
 *   cleanup) and reports the state and new output of every followed process (see FlyRound.ts).
 * - PREPARE runs once per connection: the home directory exists and the supervisor runs. On a
 *   machine made by an older kilntainers (no supervisor as its main process) it starts the
 *   supervisor from the exec, detached, and says so: if flyd ends it with the exec, the next
 *   round finds no supervisor and the computer fails loudly as lost.
 *
 * One directory per process, `/tmp/.kt/p/<tag>-<n>`:
 *   argv     `set -- cwd nEnv K=V… argv…`, written by the round, sourced by the supervisor
 *   in       stdin: appended to by writes (once per write id, `wid`), never truncated
 *   holder   pid of a `sleep` that stands for "stdin is open"; EOF kills it
 *   p        a FIFO: the feeder (`tail -f --pid=<holder> in`) writes it, the process reads it
 *   out err  the process's stdout and stderr, read back by byte offset
 *   pgid     the runner's pid = the process group (and session) of the process
 *   cpid     the pid of the process itself
 *   fail     why it could not start (working directory, command not found)
 *   exit     the process's status ($?: 128+n when killed by signal n), written by the runner
 *   rstatus  the runner's own status, written by the supervisor when the runner ended
 *
 * RUNNER traps the common terminating signals, so `kill -- -pgid` reaches the process while the
 * runner survives to record `exit`; the feeder and holder ignore them, so a signal does not close
 * stdin by itself. The process gets exactly its environment (`env -i K=V… argv`), working
 * directory and argv, never re-parsed by a shell.
 *
 * The image needs /bin/sh, GNU coreutils (`tail ---disable-inotify --pid`, `base64`, `head -c`,
 * `env -i`, `mkfifo`), sed and util-linux `setsid` — Debian and Ubuntu images have them (the
 * default is debian:bookworm-slim); Alpine needs `apk add coreutils util-linux`.
 */

/** Where the supervisor keeps its state and the process directories live. */
export const STATE_ROOT = "/tmp/.kt"
export const PROCESS_ROOT = `${STATE_ROOT}/p`
/** Where `config.files` puts the supervisor. */
export const SUPERVISOR_PATH = "/.kilntainers/supervisor"
/** The round protocol the supervisor speaks; a machine running another one is refused clearly. */
export const SUPERVISOR_VERSION = "1"
/** Finished processes a machine keeps the records and output of (the oldest go first). */
export const FINISHED_KEPT = 100

/** Quotes a string for a POSIX shell (single quotes; `'` becomes `'\''`). */
export const shellQuote = (value: string): string => `'${value.replace(/'/g, `'\\''`)}'`

/** Signals the runner survives (a handler, so its child gets the default disposition). */
const TRAPPED = "HUP INT QUIT ABRT USR1 USR2 ALRM TERM"

/** args: dir cwd nEnv K=V… argv… */
export const RUNNER = [
  `d=$1; c=$2; n=$3; shift 3`,
  `trap : ${TRAPPED}`,
  `echo $$ > "$d/pgid"`,
  `P=/bin:/usr/bin; i=0`,
  `for a in "$@"; do [ $i -ge "$n" ] && break; case $a in PATH=*) P=\${a#PATH=} ;; esac; i=$((i+1)); done`,
  `eval "a0=\\\${$((n+1))}"`,
  `fail() { printf '%s' "$1" > "$d/fail.t"; mv "$d/fail.t" "$d/fail"; exit 0; }`,
  `cd -- "$c" 2>/dev/null || fail "cannot use the working directory '$c': no such directory or not accessible"`,
  `o=$PATH; PATH=$P`,
  `case $a0 in */*) [ -f "$a0" ] && [ -x "$a0" ] ;; *) command -v -- "$a0" >/dev/null 2>&1 ;; esac || fail "'$a0': command not found (PATH=$P)"`,
  `PATH=$o`,
  `mkfifo "$d/p" || fail "cannot create the stdin pipe in $d"`,
  `(trap '' ${TRAPPED}; exec sleep 2147483647) & h=$!`,
  `echo $h > "$d/holder"`,
  `(trap '' ${TRAPPED}; exec tail ---disable-inotify -s 0.05 -c +1 -f --pid=$h "$d/in") > "$d/p" 2>/dev/null & f=$!`,
  `/bin/sh -c 'echo $$ > "$0/cpid"; exec env -i -- "$@"' "$d" "$@" < "$d/p" > "$d/out" 2> "$d/err"`,
  `x=$?`,
  `kill -9 $f $h 2>/dev/null`,
  `echo $x > "$d/exit.t"; mv "$d/exit.t" "$d/exit"`
].join("\n")

/**
 * TRIM a stream to its first `$2` and last `$3` bytes: the cut is recorded before the blocks go,
 * so a read never takes a punched block for output. Without hole punching (a filesystem that
 * cannot) the stream is kept whole.
 */
const TRIM_FUNCTION = [
  `trim() {`,
  `  z=$(wc -c < "$1" 2>/dev/null) || return 0`,
  `  [ "$z" -gt $(($2 + $3)) ] || return 0`,
  `  c=$2; read -r _h c < "$1.cut" 2>/dev/null`,
  `  e=$((z - $3)); [ "$e" -gt "$c" ] || return 0`,
  `  fallocate --punch-hole --offset "$c" --length $((e - c)) "$1" 2>/dev/null || { [ -f "$1.cut" ] || return 0; }`,
  `  echo "$2 $e" > "$1.cut.t" && mv "$1.cut.t" "$1.cut"`,
  `}`
].join("\n")

/**
 * HOUSEKEEP (args headBytes tailBytes; `R` set): trims every stream to its head and tail and drops
 * the oldest finished processes past FINISHED_KEPT. The supervisor does it every second by itself, with
 * the retention the last round wrote to `$R/retain`, so that a machine no server follows still keeps
 * its disk to the retention; a round does it only on an older machine, whose supervisor does not
 * (no `$R/keeper`).
 */
const HOUSEKEEP_FUNCTION = [
  TRIM_FUNCTION,
  `housekeep() {`,
  `  for d in "$R"/p/*/; do d=\${d%/}; [ -e "$d/trimmed" ] && continue; f=0; { [ -e "$d/rstatus" ] || [ -e "$d/fail" ]; } && f=1`,
  `    trim "$d/out" "$1" "$2"; trim "$d/err" "$1" "$2"; [ $f = 1 ] && : > "$d/trimmed"; done`,
  `  ls -1dt "$R"/p/*/rstatus 2>/dev/null | tail -n +${FINISHED_KEPT + 1} | while read -r f; do`,
  `    d=\${f%/*}; k=$(cat "$d/handle" 2>/dev/null); [ -n "$k" ] && rm -f "$R/p/.n/$k"; rm -rf -- "$d"; done`,
  `}`
].join("\n")

/** The machine's main process: `/bin/sh SUPERVISOR_PATH`. */
export const SUPERVISOR = [
  `# kilntainers process supervisor (protocol ${SUPERVISOR_VERSION}): the machine's main process.`,
  `R=${STATE_ROOT}`,
  `PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; export PATH`,
  `RUNNER=${shellQuote(RUNNER)}`,
  HOUSEKEEP_FUNCTION,
  `umask 077`,
  `mkdir -p "$R" && chmod 700 "$R" || exit 1`,
  `rm -rf "$R/sup" "$R/p" "$R/ctl" "$R/keeper"; mkdir "$R/p" && mkfifo "$R/ctl" || exit 1`,
  // The keeper: the retention holds on the machine's disk whether or not a server follows it.
  `( while sleep 1; do read -r kh kt < "$R/retain" 2>/dev/null && [ "$kh" -gt 0 ] 2>/dev/null && housekeep "$kh" "$kt"; done ) </dev/null >/dev/null 2>&1 &`,
  `: > "$R/keeper"`,
  // Who runs, since when (a pid of an earlier boot can be reused), which boot, which protocol: one file, written at once.
  `echo "$$ $(cut -d' ' -f22 /proc/$$/stat) $(cat /proc/sys/kernel/random/uuid) ${SUPERVISOR_VERSION}" > "$R/sup.t" && mv "$R/sup.t" "$R/sup" || exit 1`,
  `exec 3<>"$R/ctl"`,
  `trap 'exit 0' TERM INT HUP`,
  `while read -r d <&3; do`,
  `  case $d in "$R"/p/*) [ -f "$d/argv" ] || continue ;; *) continue ;; esac`,
  `  ( . "$d/argv" && { setsid /bin/sh -c "$RUNNER" kt "$d" "$@" & wait $!; echo $? > "$d/rstatus.t"; mv "$d/rstatus.t" "$d/rstatus"; } ) </dev/null >/dev/null 2>&1 &`,
  `done`
].join("\n")

/** alive: the supervisor of `$R/sup` runs (same pid, same start time); sets `boot` and `version` from it. */
const ALIVE_FUNCTION = [
  `alive() {`,
  `  boot=-; version=-`,
  `  read -r sp ss sb sv < ${STATE_ROOT}/sup 2>/dev/null || return 1`,
  `  [ -n "$sv" ] && [ "$(cut -d' ' -f22 "/proc/$sp/stat" 2>/dev/null)" = "$ss" ] || return 1`,
  `  tr '\\0' ' ' < "/proc/$sp/cmdline" 2>/dev/null | grep -q -- ${shellQuote(SUPERVISOR_PATH)} || return 1`,
  `  boot=$sb; version=$sv`,
  `}`
].join("\n")

/**
 * PREPARE: args home; stdin = the supervisor. Answers one line:
 *   `O <boot> <version>` the supervisor runs (the machine's main process)
 *   `L <boot> <version>` it did not run and was started from this exec (an older machine)
 */
export const PREPARE = [
  ALIVE_FUNCTION,
  `F=${shellQuote(SUPERVISOR_PATH)}`,
  `mkdir -p -- "$1" || { echo "cannot create the home directory $1" >&2; exit 3; }`,
  `if [ -f "$F" ]; then cat > /dev/null; else mkdir -p "\${F%/*}" && cat > "$F.t" && mv "$F.t" "$F" || exit 3; fi`,
  `i=0; while ! alive && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done`,
  `m=O`,
  `if ! alive; then`,
  `  m=L; setsid -f /bin/sh "$F" < /dev/null > /dev/null 2>&1 || { echo "cannot start the supervisor (setsid from util-linux is needed)" >&2; exit 3; }`,
  `  i=0; while ! alive && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done`,
  `  alive || { echo "the supervisor does not start" >&2; exit 3; }`,
  `fi`,
  `echo "$m $boot $version"`
].join("\n")

/**
 * Where a stream's retained bytes are: `<stream>.cut` holds `head end` once bytes [head, end)
 * fell out (their blocks punched out of the file, so its offsets stay the stream's). SPAN sets
 * `s` (where a read from `$2` starts: past what fell out) and `n` (how many, at most `$3`, before
 * the next gap).
 */
const SPAN_FUNCTION = [
  `span() {`,
  `  s=$2; n=$3; hc=; cc=`,
  `  read -r hc cc < "$1.cut" 2>/dev/null`,
  `  if [ -n "$cc" ]; then`,
  `    if [ "$s" -ge "$hc" ] && [ "$s" -lt "$cc" ]; then s=$cc`,
  `    elif [ "$s" -lt "$hc" ] && [ $((hc - s)) -lt "$n" ]; then n=$((hc - s)); fi`,
  `  fi`,
  `}`
].join("\n")

/**
 * REPORT of one process: args dir stdoutOffset stderrOffset cap. Lines:
 *   P <runner alive 0|1> <group alive 0|1> <exit|-> <runner status|-> <out size> <err size> <pid|-> <pgid|->
 *     <handle|-> <signals sent, comma-separated|-> <where O starts> <where E starts>
 *   F <fail message, base64>   (empty when none)
 *   O <new stdout, base64>
 *   E <new stderr, base64>
 * `exit` is read before the sizes, so output up to the sizes includes everything the process wrote itself.
 */
const REPORT_FUNCTION = [
  SPAN_FUNCTION,
  `report() {`,
  `  d=$1; oo=$2; eo=$3; cap=$4`,
  `  p=$(cat "$d/pgid" 2>/dev/null); a=0; g=0`,
  `  s=; [ -n "$p" ] && s=$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)`,
  `  [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ] && a=1`,
  `  x=$(cat "$d/exit" 2>/dev/null); r=$(cat "$d/rstatus" 2>/dev/null)`,
  `  [ -n "$p" ] && kill -s 0 -- "-$p" 2>/dev/null && g=1`,
  // Once the runner is reaped, zombies left in its group (waiting for init) do not hold it open.
  `  if [ $g = 1 ] && [ -n "$r" ]; then g=0; for f in /proc/[0-9]*/stat; do`,
  `    q=$(cat "$f" 2>/dev/null) || continue; q=\${q##*) }; set -- $q; [ "$3" = "$p" ] && [ "$1" != Z ] && { g=1; break; }`,
  `  done; fi`,
  `  so=$(wc -c < "$d/out" 2>/dev/null) || so=0`,
  `  se=$(wc -c < "$d/err" 2>/dev/null) || se=0`,
  `  c=$(cat "$d/cpid" 2>/dev/null); k=$(cat "$d/handle" 2>/dev/null); v=$(tr '\\n' , < "$d/sig" 2>/dev/null)`,
  `  span "$d/out" "$oo" "$cap"; os=$s; on=$n; span "$d/err" "$eo" "$cap"; es=$s; en=$n`,
  `  echo "P $a $g \${x:--} \${r:--} $so $se \${c:--} \${p:--} \${k:--} \${v:--} $os $es"`,
  `  printf 'F '; [ -f "$d/fail" ] && base64 < "$d/fail" | tr -d '\\n'; echo`,
  `  printf 'O '; [ "$on" -gt 0 ] && tail -c +$((os + 1)) "$d/out" 2>/dev/null | head -c "$on" | base64 | tr -d '\\n'; echo`,
  `  printf 'E '; [ "$en" -gt 0 ] && tail -c +$((es + 1)) "$d/err" 2>/dev/null | head -c "$en" | base64 | tr -d '\\n'; echo`,
  `}`
].join("\n")

/**
 * ROUND: args cap waitTicks headBytes tailBytes nBlobs op…; stdin = one base64 line per blob (start specs and stdin
 * data), read only when nBlobs > 0. Ops (one answer each, in order, after a first line
 * `S <supervisor alive 0|1> <boot|-> <version|->`):
 *   S dir blob meta   start: the blob is the `argv` file, meta its record (command, cwd); the
 *                     round allocates its handle (the next free `p/.n/<handle>`, in the machine,
 *                     so every server names it alike) and the supervisor starts the runner
 *   W dir wid blob    append the blob to stdin, once per write id
 *   C dir             close stdin (after what was written)
 *   K dir SIG         signal the process group (recorded in `sig`: every server decodes its status alike)
 *   X dir             SIGKILL what is left of the group and remove the directory
 *   R dir out err     a REPORT
 * Answers: `A` (done) or `A <message, base64>` (failed) for S W C K X, a REPORT for R. Before the
 * reports, the round waits up to 10 s for each started process to start (or fail), then up to
 * waitTicks × 10 ms for the processes it started, closed or signalled to end and those it wrote
 * to to answer: a short command, stdin with EOF, a kill or an echo costs one round. Once a second a round writes the
 * retention (headBytes, tailBytes) for the supervisor's keeper, or, on an older machine without one, does its
 * HOUSEKEEP itself.
 */
export const ROUND = [
  ALIVE_FUNCTION,
  REPORT_FUNCTION,
  HOUSEKEEP_FUNCTION,
  `R=${STATE_ROOT}; cap=$1; w=$2; kh=$3; kt=$4; b=$5; shift 5`,
  `t=$R/round.$$; [ "$b" -gt 0 ] && { cat > "$t" || { echo "cannot read the round's input" >&2; exit 3; }; }`,
  `blob() { sed -n "$1p" "$t"; }`,
  `ok() { echo A; }`,
  `no() { printf 'A %s\\n' "$(printf '%s' "$1" | base64 | tr -d '\\n')"; }`,
  `u=0; alive && u=1`,
  `echo "S $u $boot $version"`,
  `started=; settle=; watch=`,
  // The next free handle of this boot (a symlink is made once: two rounds at once never share one).
  `handle() {`,
  `  mkdir -p "$R/p/.n" || return 1; n=$(cat "$R/p/.next" 2>/dev/null); n=$((\${n:-0} + 1)); j=0`,
  `  until ln -s "$1" "$R/p/.n/$n" 2>/dev/null; do [ -L "$R/p/.n/$n" ] && [ $j -lt 100000 ] || return 1; n=$((n + 1)); j=$((j + 1)); done`,
  `  echo $n > "$R/p/.next.$$" && mv "$R/p/.next.$$" "$R/p/.next" && echo $n > "$1/handle"`,
  `}`,
  `if [ "$kh" -gt 0 ] && [ "$(date +%s)" != "$(cat "$R/p/.trim" 2>/dev/null)" ]; then`,
  `  date +%s > "$R/p/.trim"; echo "$kh $kt" > "$R/retain.$$" && mv "$R/retain.$$" "$R/retain"`,
  `  [ -e "$R/keeper" ] || housekeep "$kh" "$kt"`,
  `fi`,
  `size() { echo $(( $(wc -c < "$1/out" 2>/dev/null || echo 0) + $(wc -c < "$1/err" 2>/dev/null || echo 0) )); }`,
  `while [ $# -gt 0 ]; do`,
  `  o=$1; d=$2`,
  `  case $d in "$R"/p/*) ;; *) no "not a process directory: $d"; shift 2; continue ;; esac`,
  `  case $o in`,
  `  S) if [ $u = 0 ]; then no "the kilntainers supervisor is not running in this machine"`,
  `     elif mkdir "$d" 2>/dev/null; then`,
  `       : > "$d/in"; : > "$d/out"; : > "$d/err"`,
  `       blob "$4" | base64 -d > "$d/meta"; date +%s%3N > "$d/t0"`,
  `       if handle "$d" && blob "$3" | base64 -d > "$d/argv" && echo "$d" 1<>"$R/ctl"; then started="$started $d"; settle="$settle $d"; ok; else no "cannot queue the process"; fi`,
  `     elif [ -d "$d" ]; then ok; else no "cannot create $d"; fi`,
  `     shift 4 ;;`,
  `  W) if [ "$(cat "$d/wid" 2>/dev/null)" = "$3" ]; then ok`,
  `     elif [ -f "$d/in" ]; then watch="$watch $d:$(size "$d")"; blob "$4" | base64 -d >> "$d/in" && echo "$3" > "$d/wid" && ok || no "cannot append to stdin"`,
  `     else no "the process's stdin file is gone"; fi`,
  `     shift 4 ;;`,
  `  C) h=$(cat "$d/holder" 2>/dev/null) && kill -9 "$h" 2>/dev/null; settle="$settle $d"; ok; shift 2 ;;`,
  `  K) p=$(cat "$d/pgid" 2>/dev/null)`,
  `     if [ -z "$p" ]; then no "the process has not started"`,
  `     elif echo "$3" >> "$d/sig" && kill -s "$3" -- "-$p" 2>/dev/null || ! kill -s 0 -- "-$p" 2>/dev/null; then settle="$settle $d"; ok`,
  `     else no "cannot deliver SIG$3 to process group $p"; fi`,
  `     shift 3 ;;`,
  `  X) p=$(cat "$d/pgid" 2>/dev/null); [ -n "$p" ] && kill -s KILL -- "-$p" 2>/dev/null`,
  `     h=$(cat "$d/holder" 2>/dev/null); [ -n "$h" ] && kill -9 "$h" 2>/dev/null`,
  `     k=$(cat "$d/handle" 2>/dev/null); [ -n "$k" ] && rm -f "$R/p/.n/$k"`,
  `     rm -rf -- "$d"; ok; shift 2 ;;`,
  `  R) break ;;`,
  `  *) no "unknown operation $o"; shift 2 ;;`,
  `  esac`,
  `done`,
  `for d in $started; do`,
  `  i=0; while [ ! -e "$d/cpid" ] && [ ! -e "$d/fail" ] && [ ! -e "$d/exit" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done`,
  `done`,
  `if [ -n "$settle$watch" ]; then i=0; while [ $i -lt "$w" ]; do`,
  `  z=1; for d in $settle; do [ -e "$d/rstatus" ] || [ -e "$d/fail" ] || z=0; done`,
  `  for e in $watch; do d=\${e%:*}; [ "$(size "$d")" -gt "\${e##*:}" ] || [ -e "$d/rstatus" ] || z=0; done`,
  `  [ $z = 1 ] && break; sleep 0.01; i=$((i+1)); done; fi`,
  `while [ $# -ge 4 ] && [ "$1" = R ]; do report "$2" "$3" "$4" "$cap"; shift 4; done`,
  `rm -f "$t"`
].join("\n")

/** Sets `d` to the directory of handle `$1` in this boot, or fails with a sentence. */
const WHERE_FUNCTION = [
  `where() {`,
  `  case $1 in *[!0-9]*|'') echo "not a process handle: $1" >&2; exit 3 ;; esac`,
  `  d=$(readlink "${PROCESS_ROOT}/.n/$1" 2>/dev/null) && [ -d "$d" ] || { echo "process p$1 is not in this computer (it ended long ago, or the computer restarted)" >&2; exit 4; }`,
  `}`
].join("\n")

/**
 * LIST: every process of this boot with a handle, after the `S` line of a round. Per process:
 *   H <handle> <dir>
 *   M <meta, base64>   (its record: command and cwd, as the starting server wrote it)
 *   N <note, base64>   (why it ends, as a server noted it)
 *   T <started ms|-> <ended ms|->   (the machine's clock; ended: when the runner recorded it)
 *   and a REPORT with no output (its sizes, status, signals).
 */
export const LIST = [
  ALIVE_FUNCTION,
  REPORT_FUNCTION,
  `u=0; alive && u=1; echo "S $u $boot $version"`,
  // Files a process in the machine could have written by hand are checked, so one bad record cannot hide the others.
  `for d in ${PROCESS_ROOT}/*/; do d=\${d%/}; k=$(cat "$d/handle" 2>/dev/null)`,
  `  case $k in ''|*[!0-9]*) continue ;; esac; case $d in *[!A-Za-z0-9/._-]*) continue ;; esac`,
  `  echo "H $k $d"`,
  `  printf 'M '; base64 < "$d/meta" 2>/dev/null | tr -d '\\n'; echo`,
  `  printf 'N '; [ -f "$d/note" ] && base64 < "$d/note" | tr -d '\\n'; echo`,
  `  e=-; for f in exit rstatus fail; do [ -e "$d/$f" ] && { e=$(date -r "$d/$f" +%s%3N); break; }; done`,
  `  t=$(cat "$d/t0" 2>/dev/null); case $t$e in *[!0-9-]*|'') t=-; e=- ;; esac; echo "T \${t:--} $e"`,
  `  report "$d" 0 0 0`,
  `done`
].join("\n")

/** READ: args handle stream from most. `R <start> <total>`, then the bytes, base64, on one line. */
export const READ = [
  WHERE_FUNCTION,
  SPAN_FUNCTION,
  `where "$1"; case $2 in out|err) ;; *) echo "not a stream: $2" >&2; exit 3 ;; esac`,
  `f=$d/$2; z=$(wc -c < "$f") || exit 4`,
  `span "$f" "$3" "$4"; [ "$s" -gt "$z" ] && s=$z`,
  `echo "R $s $z"; [ "$n" -gt 0 ] && tail -c +$((s + 1)) "$f" | head -c "$n" | base64 | tr -d '\\n'; echo`
].join("\n")

/** NOTE: args handle text. Records why the process ends, for every server that lists it. */
export const NOTE = [WHERE_FUNCTION, `where "$1"; printf '%s' "$2" > "$d/note.t" && mv "$d/note.t" "$d/note"`].join("\n")
