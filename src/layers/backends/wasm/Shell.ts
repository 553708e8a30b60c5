/**
 * The toolset backend's shell: runs a parsed script (ShellParser.ts) in the main thread, each
 * command of a pipeline a WASI module instance in its own worker (Runner.ts), connected in memory
 * so stages stream into each other. Redirections open files of the computer's virtual filesystem
 * (Vfs.ts); nothing reaches the host.
 *
 * Expansion: single and double quotes, backslash escapes, `$VAR`, `${VAR}`, `${VAR:-x}`,
 * `${VAR:=x}`, `${VAR:+x}`, `${#VAR}`, `$1…$9`, `$@`, `$*`, `$#`, `$?`, `$0`, `$(…)` and backquotes,
 * `~`, field splitting of unquoted expansions, and globbing (`*`, `?`, `[…]`) against the virtual FS.
 * Builtins: `: true false echo printf cd pwd exit export unset set shift test [ sleep hostname env
 * ln -s sh bash` (`sh -c`, `sh script`). Not supported: here-documents, `case`, functions, job
 * control, `read`; there are no processes to `kill` or `ps`.
 */
import { ParseError, parse, type Command, type List, type Pipeline, type Redirect } from "./ShellParser.js"
import { Feed, type Run, type WorkerPool } from "./Runner.js"
import { concat, resolvePath, type Vfs } from "./Vfs.js"

export type Sink = (data: Uint8Array) => void

export interface Io {
  readonly stdin: Feed
  readonly stdout: Sink
  readonly stderr: Sink
}

export interface ShellHost {
  readonly vfs: Vfs
  readonly hostname: string
  /** Command name → module. */
  readonly commands: ReadonlyMap<string, WebAssembly.Module>
  readonly pool: WorkerPool
}

interface State {
  vars: Map<string, string>
  exported: Set<string>
  positional: Array<string>
  argv0: string
  cwd: string
  status: number
}

class ExitSignal {
  constructor(readonly code: number) {}
}
export class Cancelled {}

/** Everything a running shell process holds, so a kill or timeout ends it all at once. */
export class Control {
  cancelled = false
  readonly runs = new Set<Run>()
  readonly wakers = new Set<() => void>()
  cancel() {
    if (this.cancelled) return
    this.cancelled = true
    for (const run of this.runs) run.terminate()
    for (const wake of this.wakers) wake()
  }
  check() {
    if (this.cancelled) throw new Cancelled()
  }
}

const encoder = new TextEncoder()
const decoder = new TextDecoder()
const text = (s: string) => encoder.encode(s)
const SHELLS = new Set(["sh", "bash", "dash", "ash"])
const BIN_DIRS = new Set(["/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"])

const emptyFeed = () => {
  const feed = new Feed()
  feed.end()
  return feed
}

interface Piece {
  readonly s: string
  readonly q: boolean
}

const globRegex = (pattern: string) => {
  let re = "^"
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!
    if (c === "*") re += "[^/]*"
    else if (c === "?") re += "[^/]"
    else if (c === "[") {
      const end = pattern.indexOf("]", i + 2)
      if (end < 0) re += "\\["
      else {
        let body = pattern.slice(i + 1, end)
        if (body.startsWith("!")) body = "^" + body.slice(1)
        re += `[${body.replace(/\\/g, "\\\\")}]`
        i = end
      }
    } else re += c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")
  }
  return new RegExp(re + "$")
}

export class Shell {
  constructor(private readonly host: ShellHost, private readonly control: Control) {}

  /** Runs the argv of a spawn: `sh -c script [name args…]`, `sh file`, or a command. */
  async runArgv(argv: ReadonlyArray<string>, env: Readonly<Record<string, string>>, cwd: string, io: Io): Promise<number> {
    const state: State = {
      vars: new Map(Object.entries(env)),
      exported: new Set(Object.keys(env)),
      positional: [],
      argv0: "sh",
      cwd,
      status: 0
    }
    state.vars.set("PWD", cwd)
    state.exported.add("PWD")
    try {
      return await this.command(argv, state, io)
    } catch (error) {
      if (error instanceof ExitSignal) return error.code
      throw error
    }
  }

  private async script(source: string, state: State, io: Io): Promise<number> {
    let list: List
    try {
      list = parse(source)
    } catch (error) {
      if (error instanceof ParseError) {
        io.stderr(text(`sh: ${error.message}\n`))
        return 2
      }
      throw error
    }
    return this.list(list, state, io)
  }

  private async list(list: List, state: State, io: Io): Promise<number> {
    for (const item of list) {
      this.control.check()
      if (item.background) {
        // No job control: the command runs alongside; its output still reaches this process.
        const copy = cloneState(state)
        void this.andOr(item, copy, io).catch(() => undefined)
        state.status = 0
        continue
      }
      state.status = await this.andOr(item, state, io)
    }
    return state.status
  }

  private async andOr(item: List[number], state: State, io: Io): Promise<number> {
    let status = await this.pipeline(item.first, state, io)
    for (const { op, pipeline } of item.rest) {
      if ((op === "&&" && status !== 0) || (op === "||" && status === 0)) continue
      state.status = status
      status = await this.pipeline(pipeline, state, io)
    }
    return status
  }

  private async pipeline(pipeline: Pipeline, state: State, io: Io): Promise<number> {
    let status: number
    if (pipeline.commands.length === 1) status = await this.compound(pipeline.commands[0]!, state, io)
    else {
      const stages = pipeline.commands
      const feeds = stages.slice(1).map(() => new Feed())
      const controls = stages.map(() => new Control())
      const parentCancel = () => controls.forEach((c) => c.cancel())
      this.control.wakers.add(parentCancel)
      const runs = stages.map((command, i) => {
        const stageIo: Io = {
          stdin: i === 0 ? io.stdin : feeds[i - 1]!,
          stdout: i === stages.length - 1 ? io.stdout : (data) => feeds[i]!.push(data),
          stderr: io.stderr
        }
        const stage = new Shell(this.host, controls[i]!)
        return stage.compound(command, cloneState(state), stageIo).catch((error) => {
          if (error instanceof ExitSignal) return error.code
          if (error instanceof Cancelled) return 141
          throw error
        }).finally(() => {
          if (i < stages.length - 1) feeds[i]!.end()
        })
      })
      try {
        status = await runs[runs.length - 1]!
        // Like SIGPIPE: the earlier stages end when the last one has.
        controls.slice(0, -1).forEach((c) => c.cancel())
        await Promise.all(runs)
      } finally {
        this.control.wakers.delete(parentCancel)
      }
      this.control.check()
    }
    return pipeline.negate ? (status === 0 ? 1 : 0) : status
  }

  private async compound(command: Command, state: State, io: Io): Promise<number> {
    this.control.check()
    if (command._tag === "Simple") return this.simple(command, state, io)
    const opened = await this.redirect(command.redirects, state, io)
    if (typeof opened === "number") return opened
    try {
      const inner = opened.io
      switch (command._tag) {
        case "If": {
          for (const branch of command.branches) {
            if ((await this.list(branch.cond, state, inner)) === 0) return await this.list(branch.body, state, inner)
          }
          return command.otherwise === undefined ? 0 : await this.list(command.otherwise, state, inner)
        }
        case "For": {
          const items = command.items === undefined
            ? [...state.positional]
            : (await Promise.all(command.items.map((word) => this.expand(word, state, inner, true)))).flat()
          let status = 0
          for (const item of items) {
            state.vars.set(command.name, item)
            status = await this.list(command.body, state, inner)
          }
          return status
        }
        case "While": {
          let status = 0
          for (;;) {
            this.control.check()
            const cond = await this.list(command.cond, state, inner)
            if ((cond === 0) === command.until) break
            status = await this.list(command.body, state, inner)
          }
          return status
        }
        case "Group": {
          if (!command.subshell) return await this.list(command.body, state, inner)
          try {
            return await this.list(command.body, cloneState(state), inner)
          } catch (error) {
            if (error instanceof ExitSignal) return error.code
            throw error
          }
        }
      }
    } finally {
      opened.close()
    }
  }

  private async simple(command: Extract<Command, { _tag: "Simple" }>, state: State, io: Io): Promise<number> {
    const argv: Array<string> = []
    for (const word of command.words) argv.push(...(await this.expand(word, state, io, true)))
    const assigns: Array<[string, string]> = []
    for (const assign of command.assigns) {
      const eq = assign.indexOf("=")
      assigns.push([assign.slice(0, eq), (await this.expand(assign.slice(eq + 1), state, io, false))[0] ?? ""])
    }
    if (argv.length === 0) {
      for (const [name, value] of assigns) state.vars.set(name, value)
      const opened = await this.redirect(command.redirects, state, io)
      if (typeof opened === "number") return opened
      opened.close()
      return state.status
    }
    const opened = await this.redirect(command.redirects, state, io)
    if (typeof opened === "number") return opened
    try {
      if (assigns.length === 0) return await this.command(argv, state, opened.io)
      const scoped = cloneState(state)
      for (const [name, value] of assigns) {
        scoped.vars.set(name, value)
        scoped.exported.add(name)
      }
      return await this.command(argv, scoped, opened.io)
    } finally {
      opened.close()
    }
  }

  /** Opens the redirections: a new Io, or an exit status when one cannot be opened. */
  private async redirect(redirects: ReadonlyArray<Redirect>, state: State, io: Io): Promise<{ io: Io; close: () => void } | number> {
    if (redirects.length === 0) return { io, close: () => {} }
    const fds: Array<Sink | Feed> = [io.stdin, io.stdout, io.stderr]
    const closers: Array<() => void> = []
    const vfs = this.host.vfs
    for (const redirect of redirects) {
      const target = (await this.expand(redirect.target, state, io, false))[0] ?? ""
      if (redirect.op === ">&" || redirect.op === "<&") {
        if (target === "-") fds[redirect.fd] = () => {}
        else if (/^\d$/.test(target) && fds[Number(target)] !== undefined) fds[redirect.fd] = fds[Number(target)]!
        else {
          io.stderr(text(`sh: ${target}: bad file descriptor\n`))
          return 1
        }
        continue
      }
      if (redirect.op === "<") {
        if (target === "/dev/null") {
          fds[redirect.fd] = emptyFeed()
          continue
        }
        const node = vfs.lookup(state.cwd, target)
        if (node?.kind !== "file") {
          io.stderr(text(`sh: ${target}: ${node === undefined ? "No such file or directory" : "Is a directory"}\n`))
          return 1
        }
        const feed = new Feed()
        feed.push(node.data)
        feed.end()
        fds[redirect.fd] = feed
        continue
      }
      // > >> &>
      let sink: Sink
      if (target === "/dev/null") sink = () => {}
      else if (target === "/dev/stdout") sink = io.stdout
      else if (target === "/dev/stderr") sink = io.stderr
      else {
        const append = redirect.op === ">>"
        const failed = append && vfs.lookup(state.cwd, target)?.kind === "file" ? undefined : vfs.writeFile(state.cwd, target, new Uint8Array(0), append)
        if (failed !== undefined) {
          io.stderr(text(`sh: ${target}: ${failed}\n`))
          return 1
        }
        // Collected and written when the command ends (and when it grows large).
        const chunks: Array<Uint8Array> = []
        let size = 0
        const cwd = state.cwd
        const flush = () => {
          if (chunks.length === 0) return
          vfs.writeFile(cwd, target, Buffer.concat(chunks.splice(0)), true)
          size = 0
        }
        sink = (data) => {
          chunks.push(data.slice())
          size += data.byteLength
          if (size > 1024 * 1024) flush()
        }
        closers.push(flush)
      }
      if (redirect.op === "&>") {
        fds[1] = sink
        fds[2] = sink
      } else fds[redirect.fd] = sink
    }
    const stdin = fds[0] instanceof Feed ? fds[0] : emptyFeed()
    const sinkOf = (fd: number, fallback: Sink): Sink => {
      const value = fds[fd]
      return typeof value === "function" ? value : fallback
    }
    return {
      io: { stdin, stdout: sinkOf(1, io.stdout), stderr: sinkOf(2, io.stderr) },
      close: () => closers.forEach((close) => close())
    }
  }

  // --- expansion --------------------------------------------------------------------------------

  private variable(name: string, state: State): string | undefined {
    if (name === "?") return String(state.status)
    if (name === "#") return String(state.positional.length)
    if (name === "@" || name === "*") return state.positional.join(" ")
    if (name === "$") return "1"
    if (name === "!") return ""
    if (name === "0") return state.argv0
    if (/^\d+$/.test(name)) return state.positional[Number(name) - 1]
    return state.vars.get(name)
  }

  private async substitute(source: string, state: State, io: Io): Promise<string> {
    const chunks: Array<Uint8Array> = []
    const sub = cloneState(state)
    try {
      await this.script(source, sub, { stdin: io.stdin, stdout: (data) => chunks.push(data.slice()), stderr: io.stderr })
    } catch (error) {
      if (!(error instanceof ExitSignal)) throw error
      sub.status = error.code
    }
    state.status = sub.status
    return decoder.decode(Buffer.concat(chunks)).replace(/\n+$/, "")
  }

  private async braced(body: string, state: State, io: Io): Promise<string> {
    if (body.startsWith("#") && body.length > 1) return String((this.variable(body.slice(1), state) ?? "").length)
    const match = /^([A-Za-z_][A-Za-z0-9_]*|\d+|[?#@*$!])(:?[-=+?])?([\s\S]*)$/.exec(body)
    if (match === null) throw new ParseError(`\${${body}}: bad substitution`)
    const [, name, op, rest] = match as unknown as [string, string, string | undefined, string]
    const value = this.variable(name, state)
    if (op === undefined) {
      if (rest !== "") throw new ParseError(`\${${body}}: bad substitution`)
      return value ?? ""
    }
    const unset = op.startsWith(":") ? value === undefined || value === "" : value === undefined
    const word = async () => (await this.expand(rest, state, io, false))[0] ?? ""
    switch (op.replace(":", "")) {
      case "-":
        return unset ? await word() : value!
      case "=": {
        if (!unset) return value!
        const assigned = await word()
        state.vars.set(name, assigned)
        return assigned
      }
      case "+":
        return unset ? "" : await word()
      default: {
        if (!unset) return value!
        throw new ParseError(`${name}: ${(await word()) || "parameter not set"}`)
      }
    }
  }

  /** Expands a word into fields (split and globbed when `fields`), or one string. */
  async expand(raw: string, state: State, io: Io, fields: boolean): Promise<Array<string>> {
    const out: Array<Array<Piece>> = [[]]
    const current = () => out[out.length - 1]!
    const addSplit = (value: string) => {
      if (!fields) return current().push({ s: value, q: true })
      const parts = value.split(/[ \t\n]+/)
      parts.forEach((part, i) => {
        if (i > 0) out.push([])
        if (part !== "") current().push({ s: part, q: false })
      })
    }
    let i = 0
    const readDollar = async (quoted: boolean) => {
      // at raw[i] === "$"
      const next = raw[i + 1]
      if (next === "(") {
        let depth = 0
        let j = i + 1
        for (; j < raw.length; j++) {
          const c = raw[j]
          if (c === "\\") j++
          else if (c === "'" && !quoted) j = raw.indexOf("'", j + 1)
          else if (c === "(") depth++
          else if (c === ")" && --depth === 0) break
        }
        const value = await this.substitute(raw.slice(i + 2, j), state, io)
        i = j + 1
        return quoted ? current().push({ s: value, q: true }) : addSplit(value)
      }
      if (next === "{") {
        let depth = 0
        let j = i + 1
        for (; j < raw.length; j++) {
          if (raw[j] === "{") depth++
          else if (raw[j] === "}" && --depth === 0) break
        }
        const value = await this.braced(raw.slice(i + 2, j), state, io)
        i = j + 1
        return quoted ? current().push({ s: value, q: true }) : addSplit(value)
      }
      const name = /^([A-Za-z_][A-Za-z0-9_]*|[0-9?#@*$!])/.exec(raw.slice(i + 1))
      if (name === null) {
        i++
        return current().push({ s: "$", q: true })
      }
      i += 1 + name[1]!.length
      if (name[1] === "@" && quoted && fields) {
        state.positional.forEach((arg, k) => {
          if (k > 0) out.push([])
          current().push({ s: arg, q: true })
        })
        return
      }
      const value = this.variable(name[1]!, state) ?? ""
      return quoted ? current().push({ s: value, q: true }) : addSplit(value)
    }
    if (raw.startsWith("~") && (raw.length === 1 || raw[1] === "/")) {
      current().push({ s: state.vars.get("HOME") ?? "/", q: true })
      i = 1
    }
    while (i < raw.length) {
      const c = raw[i]!
      if (c === "'") {
        const end = raw.indexOf("'", i + 1)
        current().push({ s: raw.slice(i + 1, end), q: true })
        i = end + 1
      } else if (c === "\\") {
        current().push({ s: raw[i + 1] ?? "", q: true })
        i += 2
      } else if (c === "\"") {
        i++
        if (raw.slice(i, i + 3) !== "$@\"") current().push({ s: "", q: true })
        while (i < raw.length && raw[i] !== "\"") {
          const d = raw[i]!
          if (d === "\\" && "$`\"\\\n".includes(raw[i + 1] ?? "")) {
            current().push({ s: raw[i + 1]!, q: true })
            i += 2
          } else if (d === "$") await readDollar(true)
          else if (d === "`") {
            const end = raw.indexOf("`", i + 1)
            current().push({ s: await this.substitute(raw.slice(i + 1, end), state, io), q: true })
            i = end + 1
          } else {
            current().push({ s: d, q: true })
            i++
          }
        }
        i++
      } else if (c === "$") await readDollar(false)
      else if (c === "`") {
        const end = raw.indexOf("`", i + 1)
        addSplit(await this.substitute(raw.slice(i + 1, end), state, io))
        i = end + 1
      } else {
        current().push({ s: c, q: false })
        i++
      }
    }
    const result: Array<string> = []
    for (const pieces of out) {
      const joined = pieces.map((p) => p.s).join("")
      if (!fields) return [joined]
      if (pieces.length === 0) continue
      const globbing = pieces.some((p) => !p.q && /[*?[]/.test(p.s))
      if (globbing) {
        const pattern = pieces.map((p) => (p.q ? p.s.replace(/[*?[\]\\]/g, "\\$&") : p.s)).join("")
        const matches = this.glob(pattern, state.cwd)
        if (matches.length > 0) {
          result.push(...matches)
          continue
        }
      }
      result.push(joined)
    }
    return fields ? result : [result.join(" ")]
  }

  private glob(pattern: string, cwd: string): Array<string> {
    const absolute = pattern.startsWith("/")
    const segments = pattern.split("/").filter((s) => s !== "")
    let candidates: Array<{ shown: string; path: string }> = [{ shown: absolute ? "/" : "", path: absolute ? "/" : cwd }]
    for (const segment of segments) {
      const next: Array<{ shown: string; path: string }> = []
      const magic = /(^|[^\\])[*?[]/.test(segment)
      const literal = segment.replace(/\\(.)/g, "$1")
      for (const candidate of candidates) {
        const join = (name: string) => ({
          shown: candidate.shown === "" ? name : candidate.shown.endsWith("/") ? candidate.shown + name : `${candidate.shown}/${name}`,
          path: candidate.path.endsWith("/") ? candidate.path + name : `${candidate.path}/${name}`
        })
        if (!magic) {
          if (this.host.vfs.lookup("/", join(literal).path) !== undefined) next.push(join(literal))
          continue
        }
        const dir = this.host.vfs.lookup("/", candidate.path)
        if (dir?.kind !== "dir") continue
        const re = globRegex(segment)
        const names = [...dir.entries.keys()].filter((name) => re.test(name) && (!name.startsWith(".") || segment.startsWith("."))).sort()
        next.push(...names.map(join))
      }
      candidates = next
    }
    return candidates.map((c) => c.shown)
  }

  // --- commands -----------------------------------------------------------------------------------

  private async command(argv: ReadonlyArray<string>, state: State, io: Io): Promise<number> {
    this.control.check()
    const [name, ...args] = argv as [string, ...Array<string>]
    const say = (s: string) => io.stdout(text(s))
    const complain = (s: string) => io.stderr(text(s))
    const vfs = this.host.vfs
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
        say(newline ? line + "\n" : line)
        return 0
      }
      case "printf": {
        if (args.length === 0) {
          complain("printf: usage: printf format [arguments]\n")
          return 2
        }
        say(printf(args[0]!, args.slice(1)))
        return 0
      }
      case "pwd":
        say(state.cwd + "\n")
        return 0
      case "cd": {
        const target = args[0] ?? state.vars.get("HOME") ?? "/"
        if (!vfs.isDir(state.cwd, target)) {
          complain(`sh: cd: ${target}: No such directory\n`)
          return 1
        }
        state.cwd = "/" + resolvePath(state.cwd, target).join("/")
        state.vars.set("PWD", state.cwd)
        return 0
      }
      case "exit":
        throw new ExitSignal(args[0] === undefined ? state.status : Number(args[0]) & 255)
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
        const n = Number(args[0] ?? 1)
        state.positional = state.positional.slice(n)
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
        const result = test(rest, (path) => vfs.lookup(state.cwd, path))
        if (typeof result === "string") {
          complain(`${name}: ${result}\n`)
          return 2
        }
        return result ? 0 : 1
      }
      case "sleep": {
        const seconds = args.reduce((total, arg) => {
          const match = /^(\d*\.?\d+)([smhd]?)$/.exec(arg)
          const unit = { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[match?.[2] ?? ""] ?? 1
          return total + (match ? Number(match[1]) * unit : NaN)
        }, 0)
        if (!Number.isFinite(seconds) || args.length === 0) {
          complain("sleep: invalid time interval\n")
          return 1
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, seconds * 1000)
          function done() {
            clearTimeout(timer)
            resolve()
          }
          this.control.wakers.add(done)
        })
        this.control.check()
        return 0
      }
      case "hostname":
        say(this.host.hostname + "\n")
        return 0
      case "env": {
        let rest = args
        const scoped = cloneState(state)
        while (rest[0] !== undefined && rest[0].includes("=")) {
          const eq = rest[0].indexOf("=")
          scoped.vars.set(rest[0].slice(0, eq), rest[0].slice(eq + 1))
          scoped.exported.add(rest[0].slice(0, eq))
          rest = rest.slice(1)
        }
        if (rest.length > 0) return this.command(rest, scoped, io)
        say(environment(scoped).map((line) => line + "\n").join(""))
        return 0
      }
      case "ln": {
        // Symbolic links are kept by the virtual FS; `ln` without -s is the toolset's.
        const flags = args.filter((a) => /^-[sfnv]+$/.test(a)).join("")
        if (flags.includes("s")) {
          const operands = args.filter((a) => !/^-[sfnv]+$/.test(a) && a !== "--")
          if (operands.length !== 2) {
            complain("ln: usage: ln -s target link\n")
            return 1
          }
          const [target, link] = operands as [string, string]
          const existing = vfs.lookup(state.cwd, link, true)
          if (existing !== undefined && !flags.includes("f")) {
            complain(`ln: ${link}: File exists\n`)
            return 1
          }
          const failed = vfs.symlink(state.cwd, target, existing?.kind === "dir" ? `${link}/${target.split("/").pop()}` : link)
          if (failed !== undefined) {
            complain(`ln: ${link}: ${failed}\n`)
            return 1
          }
          return 0
        }
        break
      }
    }
    if (SHELLS.has(name.split("/").pop()!)) return this.nestedShell(args, state, io)

    // A script file of the computer (a path), or a command of the toolset.
    if (name.includes("/")) {
      const node = vfs.lookup(state.cwd, name)
      const dir = "/" + resolvePath(state.cwd, name).slice(0, -1).join("/")
      if (node?.kind === "file" && !BIN_DIRS.has(dir)) return this.runScript(decoder.decode(node.data), name, args, state, io)
    }
    const tool = name.includes("/") ? name.split("/").pop()! : name
    const module = this.host.commands.get(tool)
    if (module === undefined) {
      complain(`sh: ${name}: command not found\n`)
      return 127
    }
    return this.runModule(module, [tool, ...args], state, io)
  }

  private async nestedShell(args: ReadonlyArray<string>, state: State, io: Io): Promise<number> {
    let rest = args.filter((a) => !/^-[eux]+$/.test(a) && a !== "-l")
    if (rest[0] === "-c") {
      const source = rest[1]
      if (source === undefined) {
        io.stderr(text("sh: -c: option requires an argument\n"))
        return 2
      }
      rest = rest.slice(2)
      return this.runSource(source, rest[0] ?? "sh", rest.slice(1), state, io)
    }
    if (rest[0] === undefined) {
      const source = decoder.decode(await io.stdin.readAll())
      return this.runSource(source, "sh", [], state, io)
    }
    const node = this.host.vfs.lookup(state.cwd, rest[0])
    if (node?.kind !== "file") {
      io.stderr(text(`sh: ${rest[0]}: No such file\n`))
      return 127
    }
    return this.runScript(decoder.decode(node.data), rest[0], rest.slice(1), state, io)
  }

  private runScript(source: string, name: string, args: ReadonlyArray<string>, state: State, io: Io) {
    return this.runSource(source.replace(/^#![^\n]*\n/, ""), name, args, state, io)
  }

  private async runSource(source: string, argv0: string, args: ReadonlyArray<string>, state: State, io: Io): Promise<number> {
    const sub = cloneState(state)
    sub.argv0 = argv0
    sub.positional = [...args]
    try {
      return await this.script(source, sub, io)
    } catch (error) {
      if (error instanceof ExitSignal) return error.code
      throw error
    }
  }

  private async runModule(module: WebAssembly.Module, args: ReadonlyArray<string>, state: State, io: Io): Promise<number> {
    this.control.check()
    const env = environment(state)
    const vfs = this.host.vfs
    const run = this.host.pool.run({
      module,
      args,
      env,
      tree: vfs.view(),
      stdin: io.stdin,
      onStdout: io.stdout,
      onStderr: io.stderr,
      onChanges: (changes) => vfs.apply(changes)
    })
    this.control.runs.add(run)
    try {
      const outcome = await run.done
      this.control.check()
      if (outcome.trap !== undefined) io.stderr(text(`[kilntainers: ${args[0]}: WebAssembly trap: ${outcome.trap}]\n`))
      return outcome.code
    } finally {
      this.control.runs.delete(run)
    }
  }
}

const cloneState = (state: State): State => ({
  vars: new Map(state.vars),
  exported: new Set(state.exported),
  positional: [...state.positional],
  argv0: state.argv0,
  cwd: state.cwd,
  status: state.status
})

const environment = (state: State) => {
  const lines: Array<string> = []
  for (const name of state.exported) {
    const value = state.vars.get(name)
    if (value !== undefined) lines.push(`${name}=${value}`)
  }
  return lines
}

const unescape = (s: string) =>
  s.replace(/\\(0[0-7]{0,3}|x[0-9a-fA-F]{1,2}|.)/g, (_, e: string) => {
    switch (e[0]) {
      case "n": return "\n"
      case "t": return "\t"
      case "r": return "\r"
      case "a": return "\x07"
      case "b": return "\b"
      case "f": return "\f"
      case "v": return "\v"
      case "e": return "\x1b"
      case "\\": return "\\"
      case "0": return String.fromCharCode(parseInt(e.slice(1) || "0", 8))
      case "x": return String.fromCharCode(parseInt(e.slice(1), 16))
      default: return "\\" + e
    }
  })

/** printf with %s %b %d %i %u %x %X %o %c %f %e %g %%, flags/width/precision, the format reused for extra arguments. */
export const printf = (format: string, args: ReadonlyArray<string>): string => {
  let out = ""
  let next = 0
  const spec = /%([-+ 0#]*)(\d+|\*)?(?:\.(\d+|\*))?([sbdiuxXocfeEgG%])/g
  do {
    const start = next
    let last = 0
    spec.lastIndex = 0
    for (let m = spec.exec(format); m !== null; m = spec.exec(format)) {
      out += unescape(format.slice(last, m.index))
      last = m.index + m[0].length
      const [, flags = "", widthRaw, precisionRaw, conv] = m
      if (conv === "%") {
        out += "%"
        continue
      }
      const width = widthRaw === "*" ? Number(args[next++] ?? 0) : widthRaw === undefined ? 0 : Number(widthRaw)
      const precision = precisionRaw === "*" ? Number(args[next++] ?? 0) : precisionRaw === undefined ? undefined : Number(precisionRaw)
      const arg = args[next++] ?? ""
      let value: string
      switch (conv) {
        case "s": value = precision === undefined ? arg : arg.slice(0, precision); break
        case "b": value = unescape(arg); break
        case "c": value = arg.slice(0, 1); break
        case "d": case "i": case "u": value = String(Math.trunc(Number(arg) || 0)); break
        case "x": value = (Math.trunc(Number(arg)) || 0).toString(16); break
        case "X": value = (Math.trunc(Number(arg)) || 0).toString(16).toUpperCase(); break
        case "o": value = (Math.trunc(Number(arg)) || 0).toString(8); break
        case "f": value = (Number(arg) || 0).toFixed(precision ?? 6); break
        case "e": case "E": value = (Number(arg) || 0).toExponential(precision ?? 6); break
        default: value = String(Number(arg) || 0)
      }
      if (flags.includes("+") && /[dif]/.test(conv!) && !value.startsWith("-")) value = "+" + value
      if (value.length < width) {
        value = flags.includes("-") ? value.padEnd(width) : flags.includes("0") && !/[sbc]/.test(conv!) ? value.padStart(width, "0") : value.padStart(width)
      }
      out += value
    }
    out += unescape(format.slice(last))
    if (next === start) break
  } while (next < args.length)
  return out
}

/** test / [ : file tests, string and integer comparisons, !, -a, -o, parentheses not supported. */
export const test = (args: ReadonlyArray<string>, lookup: (path: string) => { readonly kind: string; readonly data?: Uint8Array } | undefined): boolean | string => {
  const orParts = split(args, "-o")
  if (orParts.length > 1) {
    const results = orParts.map((part) => test(part, lookup))
    const error = results.find((r) => typeof r === "string")
    return error ?? results.some((r) => r === true)
  }
  const andParts = split(args, "-a")
  if (andParts.length > 1) {
    const results = andParts.map((part) => test(part, lookup))
    const error = results.find((r) => typeof r === "string")
    return error ?? results.every((r) => r === true)
  }
  if (args[0] === "!" && args.length > 1) {
    const inner = test(args.slice(1), lookup)
    return typeof inner === "string" ? inner : !inner
  }
  if (args.length === 0) return false
  if (args.length === 1) return args[0] !== ""
  if (args.length === 2) {
    const [op, operand] = args as [string, string]
    const node = () => lookup(operand)
    switch (op) {
      case "-n": return operand !== ""
      case "-z": return operand === ""
      case "-e": case "-r": case "-w": return node() !== undefined
      case "-x": return node()?.kind === "dir"
      case "-f": return node()?.kind === "file"
      case "-d": return node()?.kind === "dir"
      case "-s": {
        const found = node()
        return found !== undefined && (found.kind !== "file" || (found.data?.byteLength ?? 0) > 0)
      }
      case "-L": case "-h": return false
      case "-t": return false
      default: return `${op}: unary operator expected`
    }
  }
  if (args.length === 3) {
    const [a, op, b] = args as [string, string, string]
    const num = (s: string) => (/^\s*-?\d+\s*$/.test(s) ? Number(s) : NaN)
    switch (op) {
      case "=": case "==": return a === b
      case "!=": return a !== b
      case "<": return a < b
      case ">": return a > b
      case "-eq": case "-ne": case "-lt": case "-le": case "-gt": case "-ge": {
        const x = num(a)
        const y = num(b)
        if (Number.isNaN(x) || Number.isNaN(y)) return "integer expression expected"
        return { "-eq": x === y, "-ne": x !== y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y }[op]
      }
      default: return `${op}: binary operator expected`
    }
  }
  return "too many arguments"
}

const split = (args: ReadonlyArray<string>, op: string) => {
  const parts: Array<Array<string>> = [[]]
  args.forEach((arg, i) => {
    // an operator only between operands
    if (arg === op && i > 0 && i < args.length - 1) parts.push([])
    else parts[parts.length - 1]!.push(arg)
  })
  return parts
}

export { concat }
