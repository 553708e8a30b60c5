/**
 * The shell programs the Fly backend runs inside a machine through the exec endpoint.
 *
 * The Machines exec call (`POST /machines/{id}/exec`) runs one argv to completion and answers
 * `{stdout, stderr, exit_code}`: no streaming, no TTY, no cwd, no env, no incremental stdin. So a
 * process is started **detached** and followed through files, one directory per process:
 *
 *   /tmp/.kt/<instance>-<n>/
 *     in       stdin: appended to by `write` (exec stdin, base64), never truncated
 *     holder   pid of a `sleep` that stands for "stdin is open"; `closeStdin` kills it
 *     p        a FIFO: the feeder (`tail -f --pid=<holder> in`) writes it, the process reads it
 *     out err  the process's stdout and stderr (regular files, read back by byte offset)
 *     pgid     the runner's pid = the process group (and session) of the process
 *     cpid     the pid of the process itself
 *     fail     why the process could not start (working directory, command not found)
 *     exit     the exit status ($? of the process: 128+n when killed by signal n), written last
 *
 * START (one exec) creates the directory (mkdir, so a retried request never starts it twice),
 * starts RUNNER with `setsid -f` (a new session and process group, default signal dispositions,
 * the exec returns at once), waits until the process started (or failed to), then up to a short
 * while for it to finish, and answers with a REPORT — a short command costs one exec call.
 *
 * RUNNER traps the common terminating signals with a handler (reset to the default in the child
 * by exec), so `kill -- -pgid` reaches the process while the runner survives to record `exit`.
 * The feeder and holder ignore them: a signal to the group does not close stdin by itself.
 * SIGKILL to the group also kills the runner; the backend then sees a dead runner and no `exit`.
 *
 * The process gets exactly its environment (`env -i K=V… argv`), its working directory (`cd` in
 * the runner) and argv — all passed as separate exec arguments (`"$@"`), never re-parsed by a
 * shell, so no quoting is involved.
 *
 * POLL (one exec per computer, for all of its followed processes) REPORTs each one: runner alive,
 * process group alive, `exit` (read *before* the sizes, so output up to the sizes includes
 * everything the process wrote itself), the file sizes and the new bytes from the given offsets,
 * base64 (exec answers are JSON strings: raw bytes would not survive).
 *
 * The image needs /bin/sh, GNU coreutils (`tail ---disable-inotify --pid`: polling, so the last write before EOF is never missed, `base64`, `head -c`, `env -i`, `mkfifo`)
 * and util-linux `setsid -f` — Debian and Ubuntu images have them (the default is
 * debian:bookworm-slim); Alpine needs `apk add coreutils util-linux`.
 */

/** Where process directories live inside a machine. */
export const PROCESS_ROOT = "/tmp/.kt"

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
  `(trap '' ${TRAPPED}; exec tail ---disable-inotify -s 0.1 -c +1 -f --pid=$h "$d/in") > "$d/p" 2>/dev/null & f=$!`,
  `/bin/sh -c 'echo $$ > "$0/cpid"; exec env -i -- "$@"' "$d" "$@" < "$d/p" > "$d/out" 2> "$d/err"`,
  `x=$?`,
  `kill -9 $f $h 2>/dev/null`,
  `echo $x > "$d/exit.t"; mv "$d/exit.t" "$d/exit"`
].join("\n")

/**
 * REPORT of one process: args dir stdoutOffset stderrOffset cap. Lines:
 *   P <runner alive 0|1> <group alive 0|1> <exit status|-> <out size> <err size> <pid|-> <pgid|->
 *   F <fail message, base64>   (empty when none)
 *   O <new stdout, base64>
 *   E <new stderr, base64>
 */
const REPORT_FUNCTION = [
  `report() {`,
  `  d=$1`,
  `  p=$(cat "$d/pgid" 2>/dev/null); a=0; g=0`,
  `  s=; [ -n "$p" ] && s=$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)`,
  `  [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ] && a=1`,
  `  x=$(cat "$d/exit" 2>/dev/null)`,
  `  [ -n "$p" ] && kill -s 0 -- "-$p" 2>/dev/null && g=1`,
  `  so=$(wc -c < "$d/out" 2>/dev/null) || so=0`,
  `  se=$(wc -c < "$d/err" 2>/dev/null) || se=0`,
  `  c=$(cat "$d/cpid" 2>/dev/null)`,
  `  echo "P $a $g \${x:--} $so $se \${c:--} \${p:--}"`,
  `  printf 'F '; [ -f "$d/fail" ] && base64 < "$d/fail" | tr -d '\\n'; echo`,
  `  printf 'O '; tail -c +$(($2 + 1)) "$d/out" 2>/dev/null | head -c "$4" | base64 | tr -d '\\n'; echo`,
  `  printf 'E '; tail -c +$(($3 + 1)) "$d/err" 2>/dev/null | head -c "$4" | base64 | tr -d '\\n'; echo`,
  `}`
].join("\n")

/**
 * START: args runner dir waitTicks cap cwd nEnv K=V… argv…  (a tick is 10 ms). Answers `X` when
 * the directory already existed (a retried request: the process is followed by polling), else a
 * REPORT.
 */
export const START = [
  REPORT_FUNCTION,
  `r=$1; d=$2; w=$3; cap=$4; shift 4`,
  `mkdir -p "${PROCESS_ROOT}" 2>/dev/null`,
  `if ! mkdir "$d" 2>/dev/null; then`,
  `  [ -d "$d" ] && { echo X; exit 0; }`,
  `  echo "cannot create $d" >&2; exit 3`,
  `fi`,
  `: > "$d/in"; : > "$d/out"; : > "$d/err"`,
  `setsid -f /bin/sh -c "$r" kt "$d" "$@" < /dev/null > /dev/null 2>&1 || { echo "cannot start a session (setsid -f from util-linux is needed)" >&2; exit 3; }`,
  `i=0; while [ ! -e "$d/cpid" ] && [ ! -e "$d/fail" ] && [ ! -e "$d/exit" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done`,
  `i=0; while [ ! -e "$d/exit" ] && [ ! -e "$d/fail" ] && [ $i -lt "$w" ]; do sleep 0.01; i=$((i+1)); done`,
  `report "$d" 0 0 "$cap"`
].join("\n")

/** POLL: args cap (dir outOffset errOffset)… — one REPORT per directory, in order. */
export const POLL = [
  REPORT_FUNCTION,
  `cap=$1; shift`,
  `while [ $# -ge 3 ]; do report "$1" "$2" "$3" "$cap"; shift 3; done`
].join("\n")

/**
 * WRITE: args file offset; stdin = base64 of the bytes. Appends only when the file is exactly
 * `offset` long, so a retried request never appends twice.
 */
export const WRITE = [
  `f=$1; s=$(wc -c < "$f" 2>/dev/null) || { echo "the process's stdin file is gone" >&2; exit 3; }`,
  `if [ "$s" -eq "$2" ]; then base64 -d >> "$f" || exit 3`,
  `elif [ "$s" -lt "$2" ]; then echo "the process's stdin file is shorter ($s bytes) than expected ($2)" >&2; exit 3`,
  `fi`
].join("\n")

/** CLOSE_STDIN: args dir — ends the holder, so the feeder sends what is left, then EOF. */
export const CLOSE_STDIN = `h=$(cat "$1/holder" 2>/dev/null) && kill -9 "$h" 2>/dev/null; exit 0`

/** SIGNAL: args signal(without SIG) pgid — to the whole process group. */
export const SIGNAL = `kill -s "$1" -- "-$2" 2>/dev/null || { kill -s 0 -- "-$2" 2>/dev/null && { echo "cannot deliver SIG$1 to process group $2" >&2; exit 3; }; }; exit 0`

/** CLEANUP: args dir… — SIGKILLs what is left of each process group and removes the directories. */
export const CLEANUP = [
  `for d in "$@"; do`,
  `  p=$(cat "$d/pgid" 2>/dev/null); [ -n "$p" ] && kill -s KILL -- "-$p" 2>/dev/null`,
  `  h=$(cat "$d/holder" 2>/dev/null); [ -n "$h" ] && kill -9 "$h" 2>/dev/null`,
  `  rm -rf -- "$d"`,
  `done; exit 0`
].join("\n")

/** PREPARE: args home — the home directory and the process root exist. */
export const PREPARE = `mkdir -p -- "$1" "${PROCESS_ROOT}" && chmod 700 "${PROCESS_ROOT}"`

/** One process's REPORT, parsed. */
export interface Report {
  readonly runnerAlive: boolean
  readonly groupAlive: boolean
  /** The exit status file's content, when the runner wrote it. */
  readonly status: number | undefined
  readonly outSize: number
  readonly errSize: number
  readonly pid: number | undefined
  readonly pgid: number | undefined
  readonly fail: string | undefined
  readonly out: Buffer
  readonly err: Buffer
}

const int = (text: string | undefined): number | undefined => {
  if (text === undefined || !/^\d+$/.test(text.trim())) return undefined
  return Number(text.trim())
}

/** Parses the REPORTs in an exec's stdout, in order; undefined when it is not a sequence of reports. */
export const parseReports = (stdout: string): Array<Report> | undefined => {
  const lines = stdout.split("\n")
  const reports: Array<Report> = []
  let i = 0
  while (i < lines.length) {
    const line = lines[i]!
    if (line === "") {
      i++
      continue
    }
    const head = /^P ([01]) ([01]) (\S+) (\d+) (\d+) (\S+) (\S+)$/.exec(line)
    const f = lines[i + 1]
    const o = lines[i + 2]
    const e = lines[i + 3]
    if (!head || f === undefined || o === undefined || e === undefined) return undefined
    if (!f.startsWith("F ") && f !== "F") return undefined
    if (!o.startsWith("O") || !e.startsWith("E")) return undefined
    const failText = f.slice(2)
    reports.push({
      runnerAlive: head[1] === "1",
      groupAlive: head[2] === "1",
      status: int(head[3]),
      outSize: Number(head[4]),
      errSize: Number(head[5]),
      pid: int(head[6]),
      pgid: int(head[7]),
      fail: failText === "" ? undefined : Buffer.from(failText, "base64").toString("utf8"),
      out: Buffer.from(o.slice(2), "base64"),
      err: Buffer.from(e.slice(2), "base64")
    })
    i += 4
  }
  return reports
}

/** Quotes a string for a POSIX shell (single quotes; `'` becomes `'\''`). */
export const shellQuote = (value: string): string => `'${value.replace(/'/g, `'\\''`)}'`
