/**
 * Redirections of the toolset shell (`<`, `>`, `>>`, `&>`, `2>&1`, `>&2`, `n>&-`, `<<`): the streams a
 * command gets. A file target gets a `FileWriter`: builtins write through it, and it creates (or
 * truncates) the file in the computer before a tool, which then writes the file itself.
 */
import { ENOSPC_TEXT, INODE_BYTES } from "./Quota.js"
import { Feed } from "./Feed.js"
import { FileWriter, write, type Input, type Io, type Output, type ShellHost } from "./ShellIo.js"
import type { Redirect } from "./ShellParser.js"

export interface Opened {
  readonly io: Io
  readonly close: () => void
}

/** Opens the redirections: the new streams, or an exit status when one cannot be opened. */
export const openRedirects = async (
  host: ShellHost,
  redirects: ReadonlyArray<Redirect>,
  cwd: string,
  io: Io,
  target: (word: string) => Promise<string>,
  /** A compound command's redirections: `< file` is one stream for all its commands (`while read …; done < f`). */
  compound = false
): Promise<Opened | number> => {
  if (redirects.length === 0) return { io, close: () => {} }
  const fds: Array<Input | Output | undefined> = [io.stdin, io.stdout, io.stderr]
  const writers: Array<FileWriter> = []
  const close = () => writers.forEach((writer) => writer.close())
  const fail = (message: string) => {
    close()
    write(io, 2, `sh: ${message}\n`)
    return 1
  }
  const fs = host.fs
  for (const redirect of redirects) {
    if (redirect.op === "<<") {
      // The body as if in double quotes, where a quote is only a quote.
      const body = redirect.expand ? await target(`"${redirect.target.replace(/\\"|"/g, (m) => (m === "\"" ? "\\\"" : "\\\\\\\""))}"`) : redirect.target
      const feed = new Feed()
      feed.push(new TextEncoder().encode(body))
      feed.end()
      fds[redirect.fd] = { kind: "feed", feed }
      continue
    }
    const name = await target(redirect.target)
    if (name.includes("\0")) return fail(`${JSON.stringify(name)}: a file name cannot contain NUL`)
    if (redirect.op === ">&" || redirect.op === "<&") {
      if (name === "-") fds[redirect.fd] = redirect.op === "<&" ? { kind: "empty" } : { kind: "null" }
      else if (/^\d$/.test(name) && fds[Number(name)] !== undefined) fds[redirect.fd] = fds[Number(name)]
      else return fail(`${name}: bad file descriptor`)
      continue
    }
    if (redirect.op === "<") {
      if (name === "/dev/null") {
        fds[redirect.fd] = { kind: "empty" }
        continue
      }
      const found = fs.resolve(cwd, name)
      if (found?.node.kind !== "file") return fail(`${name}: ${found === undefined ? "No such file or directory" : "Is a directory"}`)
      if (compound) {
        const feed = new Feed()
        feed.push(new Uint8Array(found.node.data))
        feed.end()
        fds[redirect.fd] = { kind: "feed", feed }
      } else fds[redirect.fd] = { kind: "from", path: found.path }
      continue
    }
    // > >> &>
    let out: Output
    if (name === "/dev/null") out = { kind: "null" }
    else if (name === "/dev/stdout") out = io.stdout
    else if (name === "/dev/stderr") out = io.stderr
    else {
      const found = fs.resolve(cwd, name)
      let path: string
      let opening: { readonly reserved: number } | undefined
      if (found !== undefined) {
        if (found.node.kind === "dir") return fail(`${name}: Is a directory`)
        path = found.path
        if (redirect.op !== ">>") opening = { reserved: 0 }
      } else {
        const at = fs.parentOf(cwd, name)
        if (at === undefined) return fail(`${name}: No such file or directory`)
        if (at.dir.entries.get(at.name)?.kind === "dir") return fail(`${name}: Is a directory`)
        if (!fs.reserve(INODE_BYTES)) return fail(`${name}: ${ENOSPC_TEXT}`)
        path = "/" + at.parts.join("/")
        opening = { reserved: INODE_BYTES }
      }
      const writer = new FileWriter(fs, path, host.writers, opening)
      writers.push(writer)
      out = { kind: "file", writer }
    }
    if (redirect.op === "&>") {
      fds[1] = out
      fds[2] = out
    } else fds[redirect.fd] = out
  }
  const isInput = (value: Input | Output | undefined): value is Input => value?.kind === "feed" || value?.kind === "from" || value?.kind === "empty"
  const output = (fd: 1 | 2, fallback: Output): Output => {
    const value = fds[fd]
    return value === undefined || isInput(value) ? fallback : value
  }
  const input = fds[0]
  const stdin: Input = isInput(input) ? input : { kind: "empty" }
  return { io: { stdin, stdout: output(1, io.stdout), stderr: output(2, io.stderr) }, close }
}
