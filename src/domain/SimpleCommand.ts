/**
 * Commands that need no shell. `sh -c "ls -la /tmp"` runs exactly what exec'ing `ls -la /tmp`
 * would, once the shell has started; starting bash costs ~1.7 ms of a sandboxed call that
 * otherwise takes ~3. For such a command the agent execs the words itself (SPAWN_DIRECT) and
 * falls back to the shell when there is nothing to exec, so the shell's own "command not found"
 * or its running of a script without `#!` stay as they were.
 *
 * Only what a POSIX shell cannot read differently qualifies: plain words of characters no shell
 * expands or treats specially, a first word that is no builtin, keyword or assignment, and an
 * environment that cannot define functions or startup files (BASH_ENV, exported functions).
 */

/** Shells whose `-c` semantics for plain words are those of POSIX (no zsh, ksh or mksh builtins). */
const posixShells = new Set(["sh", "bash", "dash", "ash"])

/** Characters that no POSIX shell expands, quotes, globs, redirects or splits on. */
const plainWord = /^[A-Za-z0-9_@%+=:,./-]+$/

/**
 * Builtins and keywords of bash and dash: they run inside the shell (or mean something else there
 * than the program of that name does), so they keep the shell. `true` and `false` without
 * arguments are the exception: the builtin and the program do exactly the same, exit 0 or 1.
 */
const shellWords = new Set([
  ".", ":", "[", "[[", "]]", "!", "{", "}", "alias", "bg", "bind", "break", "builtin", "caller", "case", "cd",
  "chdir", "command", "compgen", "complete", "compopt", "continue", "coproc", "declare", "dirs", "disown", "do",
  "done", "echo", "elif", "else", "enable", "esac", "eval", "exec", "exit", "export", "false", "fc", "fg", "fi",
  "for", "function", "getopts", "hash", "help", "history", "if", "in", "jobs", "kill", "let", "local", "logout",
  "mapfile", "popd", "printf", "pushd", "pwd", "read", "readarray", "readonly", "return", "select", "set",
  "shift", "shopt", "source", "suspend", "test", "then", "time", "times", "trap", "true", "type", "typeset",
  "ulimit", "umask", "unalias", "unset", "until", "wait", "while"
])

const sameAsBuiltin = new Set(["true", "false"])

const basename = (path: string) => path.slice(path.lastIndexOf("/") + 1)

/**
 * The words to exec for `[shell, "-c", command]` when the shell would only exec them, or undefined
 * when the command needs its shell.
 */
export const directArgv = (
  argv: ReadonlyArray<string>,
  env: Readonly<Record<string, string>>
): ReadonlyArray<string> | undefined => {
  if (argv.length !== 3 || argv[1] !== "-c" || !posixShells.has(basename(argv[0]!))) return undefined
  const words = argv[2]!.split(/[ \t]+/).filter((word) => word !== "")
  const first = words[0]
  if (first === undefined || first.includes("=")) return undefined
  if (!words.every((word) => plainWord.test(word))) return undefined
  if (shellWords.has(first) && !(sameAsBuiltin.has(first) && words.length === 1)) return undefined
  for (const name of Object.keys(env)) {
    if (name === "BASH_ENV" || name === "ENV" || name.startsWith("BASH_FUNC_")) return undefined
  }
  return words
}
