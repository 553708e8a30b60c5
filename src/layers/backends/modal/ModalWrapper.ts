/**
 * The `/bin/sh` wrapper that every process of the Modal backend runs under, and the small commands
 * that signal and resize processes. Pure: this module only builds exec requests.
 *
 * The wrapper:
 *   1. makes itself a process-group leader: when it is not one already, it re-executes itself under
 *      `setsid` (which then does not fork, so the pid stays) — signals go to the whole group with a
 *      second exec, `kill -s SIG -- -pgid`;
 *   2. changes to the working directory and checks that argv[0] can be found on the process's PATH
 *      (a bad directory or a missing command is a SpawnFailed, not a process that prints an error);
 *   3. on a TTY, sets the size with `stty` (Modal's PTY is a fixed 80x24);
 *   4. writes one header line `KT<pid> <tty>` on stdout (or `KTE<reason>` when it cannot start);
 *   5. runs `env -i K=V… argv` in the foreground — the process gets exactly SpawnSpec.env (Modal's
 *      exec env only adds to the sandbox's) — while catching the usual signals itself (the handlers
 *      are reset in the child), so that it outlives a signalled process;
 *   6. when the process has ended, writes an end marker `\0KTX<nonce>:<code>\0` on stdout and on
 *      stderr, after everything the process itself wrote to each (see WrapperOutput.ts).
 *
 * Sizes: Modal caps an exec's arguments at 64 KiB in total, so nothing that can be large travels
 * there. The wrapper itself and everything about the process (nonce, PATH, directory, command,
 * terminal size, and its argv and environment as shell words, cut into chunks) travel in the exec's
 * environment as KT_* variables; the arguments are one constant line. Inside the sandbox the
 * process's own argv and environment still go through execve, where Modal measured a limit of
 * 128 KiB (2^17 bytes), so a spawn whose quoted argv and environment exceed 120 KiB is refused
 * before anything is sent.
 */
import type { SpawnSpec } from "../../../services/Backend.js"

const DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
const TRAPPED = "HUP INT QUIT TERM USR1 USR2 PIPE ALRM"
/** Largest quoted argv + environment of a spawn (Modal's measured exec limit is 128 KiB). */
export const MAX_SPAWN_PAYLOAD_BYTES = 120 * 1024
/** Size of one KT_A<i> variable. */
const CHUNK = 32 * 1024

const WRAPPER = [
  `n=$KT_N; p=$KT_P; d=$KT_D; c=$KT_C; t=$KT_T`,
  // 1. own process group (field 5 of /proc/<pid>/stat, counted after the command name)
  `s=$(cat /proc/$$/stat 2>/dev/null); s=\${s##*) }; set -- $s`,
  `if [ "$3" != "$$" ] && [ -z "$KT_SETSID" ]; then`,
  `  command -v setsid >/dev/null 2>&1 || { printf 'KTE%s\\n' "the image has no 'setsid' (util-linux or busybox) to give the process its own process group"; exit 127; }`,
  `  KT_SETSID=1 exec setsid /bin/sh -c "$KT_W" kilntainers`,
  `fi`,
  `exec 3<&0`, // keep stdin for the process
  `a=; i=0; while [ "$i" -lt "$KT_AN" ]; do eval "a=\\$a\\$KT_A$i"; i=$((i + 1)); done`,
  `eval "set -- $a"; a=`,
  // 2. directory and command
  `cd -- "$d" 2>/dev/null || { printf 'KTE%s\\n' "cannot change to the working directory '$d'"; exit 127; }`,
  `case $c in */*) [ -f "$c" ] && [ -x "$c" ] ;; *) PATH=$p command -v -- "$c" >/dev/null 2>&1 ;; esac ||`,
  ` { printf 'KTE%s\\n' "'$c': command not found (PATH=$p)"; exit 127; }`,
  // 3. terminal size, 4. header
  `[ -z "$t" ] || stty $t 2>/dev/null`,
  `y=$(tty 2>/dev/null) || y=-`,
  `printf 'KT%s %s\\n' $$ "$y"`,
  // 5. the process, 6. the end marker
  `trap : ${TRAPPED}`,
  `env -i "$@" <&3 3<&-`,
  `r=$?`,
  `printf '\\000KTX%s:%s\\000' "$n" "$r"; [ -n "$t" ] || printf '\\000KTX%s:%s\\000' "$n" "$r" >&2`,
  `exit $r`
].join("\n")

/** The exec's constant argument list: everything else is in its environment. */
export const WRAPPER_ARGV: ReadonlyArray<string> = ["/bin/sh", "-c", `exec /bin/sh -c "$KT_W" kilntainers`]

const quote = (value: string) => `'${value.replace(/'/g, `'\\''`)}'`

/** The process's environment and argv as one string of shell words: K=V… argv… */
export const shellWords = (spec: SpawnSpec, env: Readonly<Record<string, string>>) =>
  [...Object.entries(env).map(([key, value]) => `${key}=${value}`), ...spec.argv].map(quote).join(" ")

/** Cuts a string into pieces of at most `size` code units, never inside a surrogate pair. */
const chunks = (text: string, size: number): Array<string> => {
  const pieces: Array<string> = []
  for (let at = 0; at < text.length;) {
    let end = Math.min(text.length, at + size)
    const code = text.charCodeAt(end - 1)
    if (end < text.length && code >= 0xd800 && code <= 0xdbff) end--
    pieces.push(text.slice(at, end))
    at = end
  }
  return pieces
}

/** The exec that starts a process under the wrapper: constant argv, all else in KT_* variables. */
export const wrapperExec = (spec: SpawnSpec, env: Readonly<Record<string, string>>, nonce: string) => {
  const words = chunks(shellWords(spec, env), CHUNK)
  const vars: Record<string, string> = {
    KT_W: WRAPPER,
    KT_N: nonce,
    KT_P: env["PATH"] ?? DEFAULT_PATH,
    KT_D: spec.cwd,
    KT_C: spec.argv[0]!,
    KT_T: spec.tty ? `cols ${spec.tty.cols} rows ${spec.tty.rows}` : "",
    KT_AN: String(words.length)
  }
  words.forEach((piece, i) => (vars[`KT_A${i}`] = piece))
  return { argv: WRAPPER_ARGV, env: vars }
}

/** The modal backend's own limit on a spec (after `specProblem`): what one exec inside a sandbox can carry. */
export const payloadProblem = (spec: SpawnSpec): string | undefined => {
  const size = Buffer.byteLength(shellWords(spec, spec.env))
  if (size > MAX_SPAWN_PAYLOAD_BYTES) {
    return `its arguments and environment take ${size} bytes as shell words; the modal backend passes at most ${MAX_SPAWN_PAYLOAD_BYTES} (120 KiB, under the 128 KiB Modal measured for an exec inside a sandbox)`
  }
  return undefined
}

/** Signals a process group; `session` also reaches processes of its session that left the group. */
const KILL_SCRIPT = [
  `kill -s "$1" -- "-$2" 2>/dev/null; r=$?`,
  `if [ "$3" = session ]; then`,
  `  for f in /proc/[0-9]*/stat; do s=$(cat "$f" 2>/dev/null) || continue; q=\${s%% *}; s=\${s##*) }; set -- "$1" "$2" "$3" $s`,
  `    [ "$7" = "$2" ] && kill -s "$1" "$q" 2>/dev/null; set -- "$1" "$2" "$3"; done`,
  `fi`,
  `exit $r`
].join("\n")

/** The argv that delivers `signal` (canonical name) to the group `pgid` (and its session). Exit 1: no such group. */
export const killArgv = (signal: string, pgid: number, session: boolean): ReadonlyArray<string> =>
  ["/bin/sh", "-c", KILL_SCRIPT, "kilntainers", signal.replace(/^SIG/, ""), String(pgid), session ? "session" : ""]

/** The argv that sets the size of a terminal. */
export const resizeArgv = (tty: string, cols: number, rows: number): ReadonlyArray<string> =>
  ["stty", "-F", tty, "cols", String(cols), "rows", String(rows)]
