/**
 * The builtins of the toolset shell: `: true false echo printf cd pwd exit return local export
 * unset set shift test [ read sleep hostname env ln -s`. Everything else is a tool (a WASI module) or a script.
 */
import { waitAsync } from "./Feed.js"
import { cloneState, type Control, environment, ExitSignal, ReturnSignal, type ShellState } from "./ShellControl.js"
import { write, type Io, type ShellFs } from "./ShellIo.js"
import { printf, unescape } from "./Printf.js"
import { test } from "./TestCommand.js"
import { resolvePath } from "./Vfs.js"
import { INODE_BYTES, ENOSPC_TEXT } from "./Quota.js"

export interface BuiltinContext {
  readonly fs: ShellFs
  readonly hostname: string
  readonly control: Control
  /** Runs a command (for `env NAME=value command`). */
  readonly command: (argv: ReadonlyArray<string>, state: ShellState, io: Io) => Promise<number>
}

/** Waits `ms` (or until the control is cancelled) without a timer: an Atomics wait with a timeout. */
const sleep = async (ms: number, control: Control) => {
  const cell = new Int32Array(new SharedArrayBuffer(4))
  const wake = () => {
    Atomics.store(cell, 0, 1)
    Atomics.notify(cell, 0)
  }
  control.wakers.add(wake)
  try {
    const result = waitAsync(cell, 0, 0, ms)
    if (result.async) await result.value
  } finally {
    control.wakers.delete(wake)
  }
  control.check()
}

const seconds = (args: ReadonlyArray<string>) =>
  args.reduce((total, arg) => {
    const match = /^(\d*\.?\d+)([smhd]?)$/.exec(arg)
    const unit = { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[match?.[2] ?? ""] ?? 1
    return total + (match ? Number(match[1]) * unit : NaN)
  }, 0)

/** Runs a builtin: its status, or undefined when `name` is not one. */
export const builtin = async (argv: ReadonlyArray<string>, state: ShellState, io: Io, context: BuiltinContext): Promise<number | undefined> => {
  const [name, ...args] = argv as [string, ...Array<string>]
  const say = (s: string) => (write(io, 1, s) ? 0 : 1)
  const complain = (s: string) => void write(io, 2, s)
  const fs = context.fs
  switch (name) {
    case ":":
    case "true":
      return 0
    case "false":
      return 1
    case "echo": {
      let newline = true
      let escapes = false
      let rest = args
      while (rest[0] !== undefined && /^-[neE]+$/.test(rest[0])) {
        if (rest[0].includes("n")) newline = false
        if (rest[0].includes("e")) escapes = true
        rest = rest.slice(1)
      }
      let line = rest.join(" ")
      if (escapes) line = unescape(line)
      return say(newline ? line + "\n" : line)
    }
    case "printf": {
      if (args.length === 0) {
        complain("printf: usage: printf format [arguments]\n")
        return 2
      }
      return say(printf(args[0]!, args.slice(1)))
    }
    case "pwd":
      return say(state.cwd + "\n")
    case "cd": {
      const target = args[0] ?? state.vars.get("HOME") ?? "/"
      if (!fs.isDir(state.cwd, target)) {
        complain(`sh: cd: ${target}: No such directory\n`)
        return 1
      }
      state.cwd = "/" + resolvePath(state.cwd, target).join("/")
      state.vars.set("PWD", state.cwd)
      return 0
    }
    case "exit":
      throw new ExitSignal(args[0] === undefined ? state.status : Number(args[0]) & 255)
    case "return":
      throw new ReturnSignal(args[0] === undefined ? state.status : Number(args[0]) & 255)
    case "local":
      // No scopes: a local is an ordinary variable.
      for (const arg of args) {
        const eq = arg.indexOf("=")
        if (eq >= 0) state.vars.set(arg.slice(0, eq), arg.slice(eq + 1))
        else if (!state.vars.has(arg)) state.vars.set(arg, "")
      }
      return 0
    case "export":
    case "unset":
      for (const arg of args) {
        const eq = arg.indexOf("=")
        const key = eq < 0 ? arg : arg.slice(0, eq)
        if (name === "unset") {
          state.vars.delete(key)
          state.exported.delete(key)
        } else {
          if (eq >= 0) state.vars.set(key, arg.slice(eq + 1))
          state.exported.add(key)
        }
      }
      return 0
    case "set": {
      const dashes = args.indexOf("--")
      if (dashes >= 0) state.positional = args.slice(dashes + 1)
      return 0
    }
    case "shift": {
      state.positional = state.positional.slice(Number(args[0] ?? 1))
      return 0
    }
    case "test":
    case "[": {
      let rest = args
      if (name === "[") {
        if (rest[rest.length - 1] !== "]") {
          complain("[: missing ]\n")
          return 2
        }
        rest = rest.slice(0, -1)
      }
      const result = test(rest, (path) => fs.lookup(state.cwd, path))
      if (typeof result === "string") {
        complain(`${name}: ${result}\n`)
        return 2
      }
      return result ? 0 : 1
    }
    case "sleep": {
      const total = seconds(args)
      if (!Number.isFinite(total) || args.length === 0) {
        complain("sleep: invalid time interval\n")
        return 1
      }
      await sleep(total * 1000, context.control)
      return 0
    }
    case "hostname":
      return say(context.hostname + "\n")
    case "env": {
      let rest = args
      const scoped = cloneState(state)
      while (rest[0] !== undefined && rest[0].includes("=")) {
        const eq = rest[0].indexOf("=")
        scoped.vars.set(rest[0].slice(0, eq), rest[0].slice(eq + 1))
        scoped.exported.add(rest[0].slice(0, eq))
        rest = rest.slice(1)
      }
      if (rest.length > 0) return context.command(rest, scoped, io)
      return say(environment(scoped).map((line) => line + "\n").join(""))
    }
    case "read":
      return read(args, state, io, fs)
    case "ln":
      return args.some((a) => /^-[sfnv]*s[sfnv]*$/.test(a)) ? symlink(args, state, io, fs) : undefined
  }
  return undefined
}

/** `ln -s`: symbolic links are kept by the virtual FS (`ln` without -s is the toolset's). */
const symlink = (args: ReadonlyArray<string>, state: ShellState, io: Io, fs: ShellFs): number => {
  const complain = (s: string) => void write(io, 2, s)
  const flags = args.filter((a) => /^-[sfnv]+$/.test(a)).join("")
  const operands = args.filter((a) => !/^-[sfnv]+$/.test(a) && a !== "--")
  if (operands.length !== 2) {
    complain("ln: usage: ln -s target link\n")
    return 1
  }
  const [target, link] = operands as [string, string]
  const existing = fs.lookup(state.cwd, link, true)
  if (existing !== undefined && existing.kind !== "dir" && !flags.includes("f")) {
    complain(`ln: ${link}: File exists\n`)
    return 1
  }
  const path = existing?.kind === "dir" ? `${link}/${target.split("/").pop()}` : link
  const at = fs.parentOf(state.cwd, path)
  if (at === undefined) {
    complain(`ln: ${link}: No such file or directory\n`)
    return 1
  }
  if (at.dir.entries.get(at.name)?.kind === "dir") {
    complain(`ln: ${link}: Is a directory\n`)
    return 1
  }
  if (!fs.reserve(INODE_BYTES)) {
    complain(`ln: ${link}: ${ENOSPC_TEXT}\n`)
    return 1
  }
  fs.commit([{ op: "link", path: "/" + at.parts.join("/"), target }], INODE_BYTES)
  return 0
}

/** `read [-r] [name…]`: one line of stdin split on IFS into the names (the last takes the rest; REPLY by default). */
const read = async (args: ReadonlyArray<string>, state: ShellState, io: Io, fs: ShellFs): Promise<number> => {
  const raw = args.includes("-r")
  const names = args.filter((arg) => !arg.startsWith("-"))
  let line: string | null
  if (io.stdin.kind === "feed") line = await io.stdin.feed.readLine()
  else if (io.stdin.kind === "from") {
    const node = fs.lookup("/", io.stdin.path)
    const text = node?.kind === "file" ? new TextDecoder().decode(node.data) : ""
    line = text === "" ? null : text.split("\n")[0]!
  } else line = null
  if (line === null) {
    for (const name of names.length === 0 ? ["REPLY"] : names) state.vars.set(name, "")
    return 1
  }
  if (!raw) line = line.replace(/\\(.)/g, "$1")
  if (names.length === 0) {
    state.vars.set("REPLY", line)
    return 0
  }
  const ifs = state.vars.get("IFS") ?? " \t\n"
  const separators = [...ifs].map((c) => c.replace(/[.*+?^${}()|[\]\\/-]/g, "\\$&")).join("")
  let rest = separators === "" ? line : line.replace(new RegExp(`^[${separators}]+|[${separators}]+$`, "g"), "")
  names.forEach((name, i) => {
    if (i === names.length - 1 || separators === "") {
      state.vars.set(name, rest)
      rest = ""
      return
    }
    const match = new RegExp(`^([^${separators}]*)[${separators}]+`).exec(rest)
    state.vars.set(name, match === null ? rest : match[1]!)
    rest = match === null ? "" : rest.slice(match[0].length)
  })
  return 0
}
