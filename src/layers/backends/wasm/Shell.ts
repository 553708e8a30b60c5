/**
 * The toolset backend's shell: runs a parsed script (ShellParser.ts) inside a shell worker
 * (ShellWorker.ts), never on the server's thread. Each tool of a pipeline is a WASI module instance
 * in its own tool worker (Runner.ts), the stages connected in memory (`Feed`s, Feed.ts) so they stream
 * into each other. Redirections open files of the computer's filesystem (Redirects.ts); nothing
 * reaches the host.
 *
 * Expansion is Expansion.ts, the builtins Builtins.ts (and `sh`/`bash` here: `sh -c`, `sh script`,
 * `sh` reading stdin; functions). Not supported: job control; there are no processes to `kill` or
 * `ps`. A background job (`cmd &`) runs alongside and ends with the
 * process at the latest.
 */
import { builtin } from "./Builtins.js"
import { Expander } from "./Expansion.js"
import { openRedirects } from "./Redirects.js"
import { Feed, type Sink } from "./Feed.js"
import type { RunInput, RunOutput } from "./Runner.js"
import { Cancelled, cloneState, Control, environment, ExitSignal, ReturnSignal, type ShellState } from "./ShellControl.js"
import { write, type Input, type Io, type Output, type ShellHost } from "./ShellIo.js"
import { ParseError, parse, type Command, type List, type Pipeline } from "./ShellParser.js"
import { resolvePath } from "./Vfs.js"

const decoder = new TextDecoder()
const SHELLS = new Set(["sh", "bash", "dash", "ash"])
const BIN_DIRS = new Set(["/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"])
const MAX_FUNCTION_DEPTH = 256

export class Shell {
  private readonly expander: Expander

  constructor(private readonly host: ShellHost, private readonly control: Control) {
    this.expander = new Expander(host.fs, (source, state, io) => this.script(source, state, io))
  }

  /** Runs the argv of a spawn: `sh -c script [name args…]`, `sh file`, or a command. */
  async runArgv(argv: ReadonlyArray<string>, env: Readonly<Record<string, string>>, cwd: string, io: Io): Promise<number> {
    const state: ShellState = {
      vars: new Map(Object.entries(env)),
      functions: new Map(),
      depth: 0,
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
      if (error instanceof ExitSignal || error instanceof ReturnSignal) return error.code
      throw error
    }
  }

  private async script(source: string, state: ShellState, io: Io): Promise<number> {
    let list: List
    try {
      list = parse(source)
    } catch (error) {
      if (error instanceof ParseError) {
        write(io, 2, `sh: ${error.message}\n`)
        return 2
      }
      throw error
    }
    return this.list(list, state, io)
  }

  private async list(list: List, state: ShellState, io: Io): Promise<number> {
    for (const item of list) {
      this.control.check()
      await this.host.throttle()
      if (item.background) {
        // No job control: the command runs alongside; its output still reaches this process.
        const copy = cloneState(state)
        this.host.jobs.running++
        void this.andOr(item, copy, io).catch(() => undefined).finally(() => this.host.jobs.running--)
        state.status = 0
        continue
      }
      state.status = await this.andOr(item, state, io)
    }
    return state.status
  }

  private async andOr(item: List[number], state: ShellState, io: Io): Promise<number> {
    let status = await this.pipeline(item.first, state, io)
    for (const { op, pipeline } of item.rest) {
      if ((op === "&&" && status !== 0) || (op === "||" && status === 0)) continue
      state.status = status
      status = await this.pipeline(pipeline, state, io)
    }
    return status
  }

  private async pipeline(pipeline: Pipeline, state: ShellState, io: Io): Promise<number> {
    const stages = pipeline.commands
    let status: number
    if (stages.length > this.host.maxPipeline) {
      write(io, 2, `sh: a pipeline of ${stages.length} commands is over the limit of ${this.host.maxPipeline} (each command is a thread)\n`)
      status = 126
    } else if (stages.length === 1) status = await this.compound(stages[0]!, state, io)
    else {
      const feeds = stages.slice(1).map(() => new Feed())
      const controls = stages.map(() => new Control())
      const parentCancel = () => controls.forEach((c) => c.cancel())
      this.control.wakers.add(parentCancel)
      const runs = stages.map((command, i) => {
        const into: Sink = (data, credit) => feeds[i]!.push(data, credit)
        const stageIo: Io = {
          stdin: i === 0 ? io.stdin : { kind: "feed", feed: feeds[i - 1]! },
          stdout: i === stages.length - 1 ? io.stdout : { kind: "sink", write: into },
          stderr: io.stderr
        }
        const stage = new Shell(this.host, controls[i]!)
        return stage.compound(command, cloneState(state), stageIo).catch((error) => {
          if (error instanceof ExitSignal) return error.code
          if (error instanceof Cancelled) return 141
          throw error
        }).finally(() => {
          if (i < stages.length - 1) feeds[i]!.end()
          // Its reader is gone: what its writer still sends is dropped (as SIGPIPE would).
          if (i > 0) feeds[i - 1]!.discard()
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

  private async compound(command: Command, state: ShellState, io: Io): Promise<number> {
    this.control.check()
    if (command._tag === "Simple") return this.simple(command, state, io)
    const opened = await this.redirect(command.redirects, state, io, true)
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
          const items = command.items === undefined ? [...state.positional] : await this.words(command.items, state, inner)
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
        case "Case": {
          const word = (await this.expander.expand(command.word, state, inner, false))[0] ?? ""
          for (const item of command.items) {
            for (const pattern of item.patterns) {
              if (await this.expander.matches(pattern, word, state, inner)) return await this.list(item.body, state, inner)
            }
          }
          return 0
        }
        case "Function":
          state.functions.set(command.name, command.body)
          return 0
      }
    } finally {
      opened.close()
    }
  }

  private async words(words: ReadonlyArray<string>, state: ShellState, io: Io): Promise<Array<string>> {
    const out: Array<string> = []
    for (const word of words) out.push(...(await this.expander.expand(word, state, io, true)))
    return out
  }

  private async simple(command: Extract<Command, { _tag: "Simple" }>, state: ShellState, io: Io): Promise<number> {
    try {
      const argv = await this.words(command.words, state, io)
      const assigns: Array<[string, string]> = []
      for (const assign of command.assigns) {
        const eq = assign.indexOf("=")
        assigns.push([assign.slice(0, eq), (await this.expander.expand(assign.slice(eq + 1), state, io, false))[0] ?? ""])
      }
      const opened = await this.redirect(command.redirects, state, io)
      if (typeof opened === "number") return opened
      try {
        if (argv.length === 0) {
          for (const [name, value] of assigns) state.vars.set(name, value)
          return state.status
        }
        if (assigns.length === 0) return await this.command(argv, state, opened.io)
        if (argv[0] === "read") return await this.withAssigns(assigns, state, () => this.command(argv, state, opened.io))
        const scoped = cloneState(state)
        for (const [name, value] of assigns) {
          scoped.vars.set(name, value)
          scoped.exported.add(name)
        }
        return await this.command(argv, scoped, opened.io)
      } finally {
        opened.close()
      }
    } catch (error) {
      if (!(error instanceof ParseError)) throw error
      write(io, 2, `sh: ${error.message}\n`)
      return 1
    }
  }

  /** `IFS= read …`: the assignments hold while the builtin runs (it sets variables of this shell). */
  private async withAssigns<A>(assigns: ReadonlyArray<[string, string]>, state: ShellState, body: () => Promise<A>): Promise<A> {
    const saved = assigns.map(([name]) => [name, state.vars.get(name)] as const)
    for (const [name, value] of assigns) state.vars.set(name, value)
    try {
      return await body()
    } finally {
      for (const [name, value] of saved) {
        if (value === undefined) state.vars.delete(name)
        else state.vars.set(name, value)
      }
    }
  }

  private redirect(redirects: Parameters<typeof openRedirects>[1], state: ShellState, io: Io, compound = false) {
    return openRedirects(this.host, redirects, state.cwd, io, async (word) => (await this.expander.expand(word, state, io, false))[0] ?? "", compound)
  }

  private async command(argv: ReadonlyArray<string>, state: ShellState, io: Io): Promise<number> {
    this.control.check()
    const name = argv[0]!
    const args = argv.slice(1)
    const defined = state.functions.get(name)
    if (defined !== undefined) return this.call(name, defined, args, state, io)
    const status = await builtin(argv, state, io, {
      fs: this.host.fs,
      hostname: this.host.hostname,
      control: this.control,
      command: (rest, scoped, inner) => this.command(rest, scoped, inner)
    })
    if (status !== undefined) return status
    if (SHELLS.has(name.split("/").pop()!)) return this.nestedShell(args, state, io)

    // A script file of the computer (a path), or a command of the toolset.
    if (name.includes("/")) {
      const node = this.host.fs.lookup(state.cwd, name)
      const dir = "/" + resolvePath(state.cwd, name).slice(0, -1).join("/")
      if (node?.kind === "file" && !BIN_DIRS.has(dir)) return this.runScript(decoder.decode(node.data), name, args, state, io)
    }
    const tool = name.includes("/") ? name.split("/").pop()! : name
    const module = this.host.commands.get(tool)
    if (module === undefined) {
      write(io, 2, `sh: ${name}: command not found\n`)
      return 127
    }
    return this.runModule(module, [tool, ...args], state, io)
  }

  /** Runs a function in this shell with its own positional parameters; `return` ends it. */
  private async call(name: string, body: Command, args: ReadonlyArray<string>, state: ShellState, io: Io): Promise<number> {
    if (state.depth >= MAX_FUNCTION_DEPTH) {
      write(io, 2, `sh: ${name}: maximum function nesting level exceeded (${MAX_FUNCTION_DEPTH})\n`)
      return 1
    }
    const positional = state.positional
    state.positional = [...args]
    state.depth++
    try {
      return await this.compound(body, state, io)
    } catch (error) {
      if (error instanceof ReturnSignal) return error.code
      throw error
    } finally {
      state.depth--
      state.positional = positional
    }
  }

  private async nestedShell(args: ReadonlyArray<string>, state: ShellState, io: Io): Promise<number> {
    let rest = args.filter((a) => !/^-[eux]+$/.test(a) && a !== "-l")
    if (rest[0] === "-c") {
      const source = rest[1]
      if (source === undefined) {
        write(io, 2, "sh: -c: option requires an argument\n")
        return 2
      }
      rest = rest.slice(2)
      return this.runSource(source, rest[0] ?? "sh", rest.slice(1), state, io)
    }
    if (rest[0] === undefined) return this.runSource(decoder.decode(await this.readInput(io.stdin)), "sh", [], state, io)
    const node = this.host.fs.lookup(state.cwd, rest[0])
    if (node?.kind !== "file") {
      write(io, 2, `sh: ${rest[0]}: No such file\n`)
      return 127
    }
    return this.runScript(decoder.decode(node.data), rest[0], rest.slice(1), state, io)
  }

  private async readInput(input: Input): Promise<Uint8Array> {
    if (input.kind === "feed") return input.feed.readAll()
    if (input.kind === "empty") return new Uint8Array(0)
    const node = this.host.fs.lookup("/", input.path)
    return node?.kind === "file" ? new Uint8Array(node.data) : new Uint8Array(0)
  }

  private runScript(source: string, name: string, args: ReadonlyArray<string>, state: ShellState, io: Io) {
    return this.runSource(source.replace(/^#![^\n]*\n/, ""), name, args, state, io)
  }

  private async runSource(source: string, argv0: string, args: ReadonlyArray<string>, state: ShellState, io: Io): Promise<number> {
    const sub = cloneState(state)
    sub.argv0 = argv0
    sub.positional = [...args]
    try {
      return await this.script(source, sub, io)
    } catch (error) {
      if (error instanceof ExitSignal || error instanceof ReturnSignal) return error.code
      throw error
    }
  }

  private async runModule(module: WebAssembly.Module, args: ReadonlyArray<string>, state: ShellState, io: Io): Promise<number> {
    this.control.check()
    const env = environment(state)
    if ([...args, ...env].some((value) => value.includes("\0"))) {
      write(io, 2, `sh: ${args[0]}: an argument or variable contains NUL, which a program cannot receive\n`)
      return 126
    }
    // What builtins wrote to redirected files is in the computer before the tool reads it.
    this.host.writers.forEach((writer) => writer.flush())
    const output = (out: Output): RunOutput => (out.kind === "sink" ? out.write : out.kind === "null" ? "null" : { file: out.writer.path })
    const stdin: RunInput = io.stdin.kind === "feed" ? io.stdin.feed : io.stdin.kind === "from" ? { file: io.stdin.path } : "empty"
    const fs = this.host.fs
    const run = this.host.pool.run({
      module,
      args,
      env,
      tree: fs.view(),
      stdin,
      stdout: output(io.stdout),
      stderr: io.stderr === io.stdout && io.stdout.kind === "file" ? "stdout" : output(io.stderr),
      quota: fs.quota,
      reserved: fs.reserved,
      onChanges: (changes, reserved) => fs.commit(changes, reserved)
    })
    if (run === undefined) {
      write(io, 2, `sh: ${args[0]}: cannot start: ${this.host.pool.limit} commands are running in this process (Resource temporarily unavailable)\n`)
      return 126
    }
    this.control.runs.add(run)
    try {
      const outcome = await run.done
      this.control.check()
      if (outcome.trap !== undefined) write(io, 2, `[kilntainers: ${args[0]}: WebAssembly trap: ${outcome.trap}]\n`)
      return outcome.code
    } finally {
      this.control.runs.delete(run)
    }
  }
}
