import { assert, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe } from "vitest"
import * as WasmBackend from "../../../src/layers/backends/WasmBackend.js"
import { capMemory, memoryLimits } from "../../../src/layers/backends/wasm/WasmModule.js"
import { parse } from "../../../src/layers/backends/wasm/ShellParser.js"
import type { BackendComputer, BackendProcess, ExitInfo, SpawnSpec } from "../../../src/services/Backend.js"
import { describeIf } from "../../support/Requirements.js"

const toolsetDir = WasmBackend.findToolsetDir()
const built = toolsetDir !== undefined
const testModule = (name: string) => join(toolsetDir ?? "wasm/build", "test", `${name}.wasm`)

const stateDir = mkdtempSync(join(tmpdir(), "kt-wasm-test-"))
afterAll(() => rmSync(stateDir, { recursive: true, force: true }))

const ENV = { PATH: "/usr/bin:/bin", HOME: "/home/agent", LANG: "C.UTF-8" }
let counter = 0
const computerId = () => `w${process.pid}-${++counter}`

const options = (extra: Partial<WasmBackend.WasmBackendOptions> = {}): WasmBackend.WasmBackendOptions => ({
  mode: "toolset",
  modulePath: undefined,
  maxMemoryMb: 256,
  timeoutMs: 0,
  stateDir,
  ...extra
})

const openComputer = (extra: Partial<WasmBackend.WasmBackendOptions> = {}, id = computerId(), temporary = true) =>
  Effect.gen(function*() {
    const backend = yield* WasmBackend.make(options(extra))
    return yield* backend.open({ id, temporary })
  })

const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({ argv, cwd: "/home/agent", env: ENV, ...extra })

interface Outcome {
  readonly stdout: string
  readonly stderr: string
  readonly exit: ExitInfo | undefined
}

const collect = (process: BackendProcess) =>
  Stream.runFold(process.events, { stdout: "", stderr: "", exit: undefined } as Outcome, (acc, event) => {
    switch (event._tag) {
      case "Stdout":
        return { ...acc, stdout: acc.stdout + Buffer.from(event.data).toString("utf8") }
      case "Stderr":
        return { ...acc, stderr: acc.stderr + Buffer.from(event.data).toString("utf8") }
      case "Exit":
        return { ...acc, exit: event.exit }
    }
  })

const sh = (computer: BackendComputer, script: string, stdin?: string, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.gen(function*() {
    const process = yield* computer.spawn(spec(["/bin/sh", "-c", script], extra))
    if (stdin !== undefined) yield* process.write(new TextEncoder().encode(stdin))
    yield* process.closeStdin
    return yield* collect(process)
  }))

const ok = (computer: BackendComputer, script: string, stdin?: string) =>
  Effect.gen(function*() {
    const result = yield* sh(computer, script, stdin)
    assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null }, `${script}: ${result.stderr}`)
    return result.stdout
  })

describe("shell parser", () => {
  it("parses lists, pipelines, redirections and compound commands", () => {
    const list = parse("a 'b c' \"$d\" | e > f 2>&1 && g || h; if x; then y; else z; fi\nfor i in 1 2; do echo $i; done &")
    assert.strictEqual(list.length, 3)
    const first = list[0]!
    assert.strictEqual(first.first.commands.length, 2)
    assert.deepStrictEqual(first.rest.map((r) => r.op), ["&&", "||"])
    const e = first.first.commands[1]!
    assert.strictEqual(e._tag, "Simple")
    if (e._tag === "Simple") assert.deepStrictEqual(e.redirects, [{ fd: 1, op: ">", target: "f" }, { fd: 2, op: ">&", target: "1" }])
    assert.strictEqual(list[1]!.first.commands[0]!._tag, "If")
    assert.isTrue(list[2]!.background)
    assert.throws(() => parse("echo 'unterminated"))
  })
})

describe("memory section", () => {
  // (module (memory 1 2)) and (module (memory 1)) by hand
  const header = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]
  const withMax = new Uint8Array([...header, 0x05, 0x04, 0x01, 0x01, 0x01, 0x02])
  const noMax = new Uint8Array([...header, 0x05, 0x03, 0x01, 0x00, 0x01])
  const bigStart = new Uint8Array([...header, 0x05, 0x04, 0x01, 0x00, 0x80, 0x10])

  it("reads the limits and caps a missing or too large maximum", () => {
    assert.deepStrictEqual(memoryLimits(withMax), { initialPages: 1, maximumPages: 2 })
    const kept = capMemory(withMax, 1024 * 1024)
    assert.isTrue(kept._tag === "Ok" && !kept.capped)
    const capped = capMemory(noMax, 1024 * 1024)
    assert.strictEqual(capped._tag, "Ok")
    if (capped._tag === "Ok") {
      assert.isTrue(capped.capped)
      assert.deepStrictEqual(memoryLimits(capped.bytes), { initialPages: 1, maximumPages: 16 })
      assert.isTrue(WebAssembly.validate(Uint8Array.from(capped.bytes)))
    }
    const lowered = capMemory(withMax, 64 * 1024)
    assert.isTrue(lowered._tag === "Ok" && lowered.capped && memoryLimits(lowered.bytes)?.maximumPages === 1)
    const refused = capMemory(bigStart, 1024 * 1024)
    assert.strictEqual(refused._tag, "Refused")
  })
})

describeIf(built, "the WASI toolset (bash wasm/build.sh)")("wasm backend", () => {
  it.scopedLive("every built tool runs", () =>
    Effect.gen(function*() {
      const c = yield* openComputer()
      yield* ok(c, "printf 'b\\na\\nb\\nc\\n' > f.txt && mkdir -p d/e && echo hello > d/e/g.txt")
      const checks: Array<[string, string]> = [
        ["ls", "d\nf.txt\n"],
        ["cat f.txt", "b\na\nb\nc\n"],
        ["grep -c b f.txt", "2\n"],
        ["sed s/b/B/ f.txt", "B\na\nB\nc\n"],
        ["awk '{n++} END {print n}' f.txt", "4\n"],
        ["sort f.txt", "a\nb\nb\nc\n"],
        ["sort f.txt | uniq -c | awk '{print $1 $2}'", "1a\n2b\n1c\n"],
        ["wc -l < f.txt", "4\n"],
        ["head -n 2 f.txt", "b\na\n"],
        ["tail -n 1 f.txt", "c\n"],
        ["echo a:b:c | cut -d: -f2", "b\n"],
        ["echo abc | tr a-c A-C", "ABC\n"],
        ["find d -name '*.txt'", "d/e/g.txt\n"],
        ["echo hi", "hi\n"],
        ["cp f.txt g.txt && mv g.txt h.txt && cat h.txt | wc -l", "4\n"],
        ["rm h.txt && ls", "d\nf.txt\n"],
        ["mkdir m && rmdir m && echo gone", "gone\n"],
        ["dirname /a/b/c; basename /a/b/c", "/a/b\nc\n"],
        ["seq 3 | tac | paste -s -d,", "3,2,1\n"],
        ["echo hi | md5sum", "764efa883dda1e11db47671c4a3bbd9e  -\n"],
        ["echo hi | rev", "ih\n"],
        ["printf 'x\\n' | nl -b a | tr -d ' \\t'", "1x\n"],
        ["expr 2 + 3", "5\n"],
        ["echo hello | od -c | head -n 1 | tr -s ' '", "0000000 h e l l o \\n\n"]
      ]
      for (const [script, expected] of checks) {
        assert.strictEqual(yield* ok(c, script), expected, script)
      }
    }), 120_000)

  it.scopedLive("pipelines, redirections, && || ; and expansion", () =>
    Effect.gen(function*() {
      const c = yield* openComputer()
      yield* ok(c, "printf 'x1\\ny\\nx2\\n' > f")
      assert.strictEqual(yield* ok(c, "cat f | grep x | wc -l"), "2\n")
      assert.strictEqual(yield* ok(c, "grep x f > out; echo more >> out; cat < out"), "x1\nx2\nmore\n")
      assert.strictEqual(yield* ok(c, "cat nope 2> err; cat err | wc -l"), "1\n")
      assert.strictEqual(yield* ok(c, "cat nope > both 2>&1; grep -c nope both"), "1\n")
      assert.strictEqual(yield* ok(c, "false && echo no || echo yes; true && echo and"), "yes\nand\n")
      assert.strictEqual(yield* ok(c, "X='a  b'; echo \"$X\" $X ${Y:-dflt} '$X' \\$X"), "a  b a b dflt $X $X\n")
      assert.strictEqual(yield* ok(c, "echo $(echo sub | tr a-z A-Z) \"$(printf '%s-%s' 1 2)\""), "SUB 1-2\n")
      assert.strictEqual(yield* ok(c, "touch a.log b.log && echo *.log; echo 'no*match'"), "a.log b.log\nno*match\n")
      assert.strictEqual(yield* ok(c, "for i in 1 2 3; do echo -n $i; done; echo; if [ -f f ]; then echo file; fi"), "123\nfile\n")
      assert.strictEqual(yield* ok(c, "cd /tmp && pwd && cd .. && pwd"), "/tmp\n/\n")
      assert.strictEqual(yield* ok(c, "echo $GREETING", undefined), "\n")
      const args = yield* Effect.scoped(Effect.gen(function*() {
        const p = yield* c.spawn(spec(["sh", "-c", "echo \"$1\" $#", "sh", "a b  c"]))
        return yield* collect(p)
      }))
      assert.strictEqual(args.stdout, "a b  c 1\n")
      // streaming: a producer that never ends is stopped when the consumer has enough
      assert.strictEqual(yield* ok(c, "yes | head -n 2"), "y\ny\n")
      // stdin reaches the first command
      assert.strictEqual(yield* ok(c, "wc -c", "12345\n"), "6\n")
      const failed = yield* sh(c, "echo broken >&2; exit 42")
      assert.deepStrictEqual(failed.exit, { exitCode: 42, signal: null })
      assert.strictEqual(failed.stderr, "broken\n")
      const missing = yield* sh(c, "nosuchtool")
      assert.strictEqual(missing.exit?.exitCode, 127)
    }), 120_000)

  it.scopedLive("no host path is reachable", () =>
    Effect.gen(function*() {
      const c = yield* openComputer()
      const passwd = yield* sh(c, "cat /etc/passwd")
      assert.notStrictEqual(passwd.exit?.exitCode, 0)
      assert.strictEqual(yield* ok(c, "cat ../../../../etc/hostname"), `${c.providerId.slice(5)}\n`)
      assert.strictEqual(yield* ok(c, "ls /"), "bin\netc\nhome\ntmp\n")
      assert.strictEqual(yield* ok(c, "cd ../../../.. && pwd && ls"), "/\nbin\netc\nhome\ntmp\n")
      const spawned = yield* Effect.scoped(Effect.gen(function*() {
        const p = yield* c.spawn(spec(["sh", "-c", "pwd; ls"], { cwd: "/../../.." }))
        return yield* collect(p)
      }))
      assert.strictEqual(spawned.stdout, "/\nbin\netc\nhome\ntmp\n")
      // a symlink to a host path points into the computer
      assert.strictEqual(yield* ok(c, "ln -s /etc/hostname link && cat link"), `${c.providerId.slice(5)}\n`)
    }), 60_000)

  it.scopedLive("a wall-clock limit ends an infinite loop; kill ends a process", () =>
    Effect.gen(function*() {
      const c = yield* openComputer({ mode: "module", modulePath: testModule("spin"), timeoutMs: 500 })
      const started = Date.now()
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const p = yield* c.spawn(spec(["spin"]))
        return yield* collect(p)
      }))
      assert.deepStrictEqual(result.exit, { exitCode: null, signal: "SIGKILL" })
      assert.match(result.stderr, /wall-clock limit of 500 ms/)
      assert.isBelow(Date.now() - started, 5_000)
      const t = yield* openComputer()
      const killed = yield* Effect.scoped(Effect.gen(function*() {
        const p = yield* t.spawn(spec(["sh", "-c", "yes > /dev/null"]))
        yield* Effect.sleep("200 millis")
        yield* p.signal("SIGTERM")
        const usr = yield* Effect.flip(p.signal("SIGUSR1"))
        assert.strictEqual(usr._tag, "Unsupported")
        return yield* collect(p)
      }))
      assert.deepStrictEqual(killed.exit, { exitCode: null, signal: "SIGTERM" })
    }), 60_000)

  it.scopedLive("memory: a module over the cap is capped; one that needs more at start is refused", () =>
    Effect.gen(function*() {
      // bigmem declares a 1 GiB maximum and allocates 200 MiB: under a 64 MiB cap it cannot
      const declared = memoryLimits(new Uint8Array(readFileSync(testModule("bigmem"))))
      assert.strictEqual(declared?.maximumPages, 16384)
      for (const name of ["bigmem", "nomax"]) {
        const c = yield* openComputer({ mode: "module", modulePath: testModule(name), maxMemoryMb: 64 })
        const capped = yield* Effect.scoped(Effect.flatMap(c.spawn(spec([name])), collect))
        assert.strictEqual(capped.stdout, "allocation refused\n", name)
        const roomy = yield* openComputer({ mode: "module", modulePath: testModule(name), maxMemoryMb: 512 })
        const fits = yield* Effect.scoped(Effect.flatMap(roomy.spawn(spec([name])), collect))
        assert.strictEqual(fits.stdout, "allocated 200 MiB\n", name)
      }
      const refused = yield* Effect.flip(WasmBackend.make(options({ mode: "module", modulePath: testModule("hello"), maxMemoryMb: 0.05 })))
      assert.match(refused.reason, /needs .* MiB of memory at start/)
    }), 60_000)

  it.scopedLive("module mode: argv, env, stdin and the virtual filesystem", () =>
    Effect.gen(function*() {
      const backend = yield* WasmBackend.make(options({ mode: "module", modulePath: testModule("hello") }))
      assert.isFalse(backend.capabilities.files)
      const c = yield* backend.open({ id: computerId(), temporary: true })
      const run = (argv: ReadonlyArray<string>, stdin: string) =>
        Effect.scoped(Effect.gen(function*() {
          const p = yield* c.spawn(spec(argv, { env: { ...ENV, GREETING: "hi there" } }))
          yield* p.write(new TextEncoder().encode(stdin))
          yield* p.closeStdin
          return yield* collect(p)
        }))
      const first = yield* run(["hello", "one", "two words"], "from stdin\n")
      assert.strictEqual(first.stdout, "arg0=hello\narg1=one\narg2=two words\nGREETING=hi there\nfrom stdin\n")
      assert.deepStrictEqual(first.exit, { exitCode: 0, signal: null })
      // hello.wasm wrote /data/out.txt only if /data exists; the FS persists between processes
      const again = yield* run(["hello", "x"], "")
      assert.deepStrictEqual(again.exit, { exitCode: 3, signal: null })
    }), 60_000)

  it.scopedLive("the filesystem persists across processes and restart, factory reset erases it", () =>
    Effect.gen(function*() {
      const id = computerId()
      const c = yield* openComputer({}, id, false)
      yield* ok(c, "echo kept > k.txt")
      yield* c.restart
      assert.strictEqual(yield* ok(c, "cat k.txt"), "kept\n")
      assert.isTrue(existsSync(join(stateDir, "wasm-computers", `${id}.json`)))
      yield* c.factoryReset
      const gone = yield* sh(c, "cat k.txt")
      assert.notStrictEqual(gone.exit?.exitCode, 0)
      yield* c.destroy
      assert.isFalse(existsSync(join(stateDir, "wasm-computers", `${id}.json`)))
    }), 60_000)

  it.effect("--wasm-path is required in module mode", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Effect.scoped(WasmBackend.make(options({ mode: "module" }))))
      assert.match(error.reason, /--wasm-path/)
    }))
})
