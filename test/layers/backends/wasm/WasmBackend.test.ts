import { assert, it } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { mkdir } from "node:fs/promises"
import { join } from "node:path"
import { afterAll, describe } from "vitest"
import { toLabels } from "../../../../src/domain/ComputerMetadata.js"
import * as WasmBackend from "../../../../src/layers/backends/wasm/WasmBackend.js"
import { capMemory, memoryLimits } from "../../../../src/layers/backends/wasm/WasmModule.js"
import { parse } from "../../../../src/layers/backends/wasm/ShellParser.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import type { Connection } from "../../../../src/services/Backend.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Files } from "../../../../src/services/Files.js"
import { Processes } from "../../../../src/services/Processes.js"
import { Settings } from "../../../../src/services/Settings.js"
import { describeIf } from "../../../support/Requirements.js"
import {
  collect,
  computerId,
  connection as openComputer,
  connectNew,
  metadata,
  options,
  sh,
  spec,
  stateDir
} from "../../../support/WasmProvider.js"

const toolsetDir = WasmBackend.findToolsetDir()
const built = toolsetDir !== undefined
const testModule = (name: string) => join(toolsetDir ?? "wasm/build", "test", `${name}.wasm`)

afterAll(() => rmSync(stateDir, { recursive: true, force: true }))

const ENV = { PATH: "/usr/bin:/bin", HOME: "/home/agent", LANG: "C.UTF-8" }

const ok = (computer: Connection, script: string, stdin?: string) =>
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
    const [withDoc] = parse("cat <<EOF > out\nbody $x\nEOF\n")
    const cat = withDoc!.first.commands[0]!
    assert.strictEqual(cat._tag, "Simple")
    if (cat._tag === "Simple") assert.deepStrictEqual(cat.redirects, [{ fd: 0, op: "<<", target: "body $x\n", expand: true }, { fd: 1, op: ">", target: "out" }])
    const [chosen] = parse("case $a in x|y) b;; (*) c;; esac")
    assert.strictEqual(chosen!.first.commands[0]!._tag, "Case")
    const [defined] = parse("f() { g; }")
    assert.strictEqual(defined!.first.commands[0]!._tag, "Function")
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

  it.scopedLive("here-documents, case, functions and arithmetic", () =>
    Effect.gen(function*() {
      const c = yield* openComputer()
      assert.strictEqual(yield* ok(c, "X=v; cat <<EOF\nhello $X \"q\" \\$X $(echo sub)\nEOF\necho after"), "hello v \"q\" $X sub\nafter\n")
      assert.strictEqual(yield* ok(c, "cat <<'END' | tr a-z A-Z\nkeep $X as is\nEND"), "KEEP $X AS IS\n")
      assert.strictEqual(yield* ok(c, "cat > f <<-EOF\n\tindented\n\tEOF\ncat f"), "indented\n")
      const unterminated = yield* sh(c, "cat <<EOF\nnever ends")
      assert.strictEqual(unterminated.exit?.exitCode, 2)
      assert.match(unterminated.stderr, /here-document/)
      const kind = (name: string) => ok(c, `case ${name} in *.md) echo md;; *.txt|*.text) echo text;; "*") echo star;; a/*) echo dir;; *) echo other;; esac`)
      assert.strictEqual(yield* kind("notes.txt"), "text\n")
      assert.strictEqual(yield* kind("a/b/c"), "dir\n")
      assert.strictEqual(yield* kind("'*'"), "star\n")
      assert.strictEqual(yield* kind("x"), "other\n")
      assert.strictEqual(yield* ok(c, "greet() { echo \"hi $1 ($#)\"; return 3; }\ngreet bob two; echo $? \"[$1]\""), "hi bob (2)\n3 []\n")
      assert.strictEqual(yield* ok(c, "count() { local n=$1; if [ $n -gt 0 ]; then echo $n; count $((n - 1)); fi; }; count 3"), "3\n2\n1\n")
      const runaway = yield* sh(c, "f() { f; }; f")
      assert.match(runaway.stderr, /maximum function nesting level exceeded/)
      assert.strictEqual(
        yield* ok(c, "echo $((1 + 2 * 3)) $((10 / 3)) $((2 ** 10)) $((-7 % 3)) $(( (1 << 4) | 1 )) $((3 > 2 && 0 || 5))"),
        "7 3 1024 -1 17 1\n"
      )
      assert.strictEqual(yield* ok(c, "i=5; i=$((i + 1)); echo $i $((x += 2)) $x $((y = 0x10, y * 2))"), "6 2 2 32\n")
      assert.strictEqual(yield* ok(c, "printf 'a b c\\nd  e\\n' | while read x y; do echo \"[$x][$y]\"; done"), "[a][b c]\n[d][e]\n")
      assert.strictEqual(yield* ok(c, "printf 'l1\\nl 2\\n' > lines; while read -r line; do echo \"got $line\"; done < lines"), "got l1\ngot l 2\n")
      assert.strictEqual(yield* ok(c, "IFS=: read a b <<EOF\nx:y:z\nEOF\necho \"$a-$b-$IFS\" | od -c | head -n 1 | tr -s ' '"), "0000000 x - y : z - \\n\n")
      assert.strictEqual(yield* ok(c, "echo one | { read first; echo \"first=$first\"; }; read gone < /dev/null; echo $?"), "first=one\n1\n")
      const divided = yield* sh(c, "echo $((1 / 0)); echo next")
      assert.match(divided.stderr, /division by 0/)
      assert.strictEqual(divided.stdout, "next\n")
    }), 60_000)

  it.scopedLive("no host path is reachable", () =>
    Effect.gen(function*() {
      const id = computerId()
      const c = yield* openComputer({}, id)
      const passwd = yield* sh(c, "cat /etc/passwd")
      assert.notStrictEqual(passwd.exit?.exitCode, 0)
      assert.strictEqual(yield* ok(c, "cat ../../../../etc/hostname"), `${id}\n`)
      assert.strictEqual(yield* ok(c, "ls /"), "bin\netc\nhome\ntmp\n")
      assert.strictEqual(yield* ok(c, "cd ../../../.. && pwd && ls"), "/\nbin\netc\nhome\ntmp\n")
      const spawned = yield* Effect.scoped(Effect.gen(function*() {
        const p = yield* c.spawn(spec(["sh", "-c", "pwd; ls"], { cwd: "/../../.." }))
        return yield* collect(p)
      }))
      assert.strictEqual(spawned.stdout, "/\nbin\netc\nhome\ntmp\n")
      // a symlink to a host path points into the computer
      assert.strictEqual(yield* ok(c, "ln -s /etc/hostname link && cat link"), `${id}\n`)
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

  it.scopedLive("the shell runs in a worker: a spinning loop ends at the wall-clock limit, a sleep ends at once when killed", () =>
    Effect.gen(function*() {
      const c = yield* openComputer({ timeoutMs: 800 })
      const started = Date.now()
      const spun = yield* sh(c, "echo before; while true; do :; done")
      assert.deepStrictEqual(spun.exit, { exitCode: null, signal: "SIGKILL" })
      assert.strictEqual(spun.stdout, "before\n")
      assert.match(spun.stderr, /wall-clock limit of 800 ms/)
      assert.isBelow(Date.now() - started, 5_000)
      const t = yield* openComputer()
      const killedAt = yield* Effect.scoped(Effect.gen(function*() {
        const p = yield* t.spawn(spec(["sh", "-c", "sleep 300"]))
        yield* Effect.sleep("200 millis")
        const at = Date.now()
        yield* p.signal("SIGKILL")
        const result = yield* collect(p)
        assert.deepStrictEqual(result.exit, { exitCode: null, signal: "SIGKILL" })
        return Date.now() - at
      }))
      assert.isBelow(killedAt, 3_000)
    }), 60_000)

  it.scopedLive("processes of a computer see each other's files while they run", () =>
    Effect.gen(function*() {
      const c = yield* openComputer()
      const waiting = yield* Effect.scoped(Effect.gen(function*() {
        const p = yield* c.spawn(spec(["sh", "-c", "while [ ! -f /tmp/go ]; do sleep 0.05; done; cat /tmp/go"]))
        yield* Effect.sleep("300 millis")
        yield* ok(c, "echo go > /tmp/go")
        return yield* collect(p)
      })).pipe(Effect.timeout("20 seconds"))
      assert.strictEqual(waiting.stdout, "go\n")
      // A script read from stdin, and a background job that ends with its process.
      assert.strictEqual(yield* ok(c, "sh", "echo from stdin; echo second | tr a-z A-Z\n"), "from stdin\nSECOND\n")
      const background = yield* sh(c, "sleep 100 & echo started")
      assert.strictEqual(background.stdout, "started\n")
      assert.deepStrictEqual(background.exit, { exitCode: 0, signal: null })
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
      assert.strictEqual(refused.reason, "Invalid")
      assert.match(refused.message, /needs .* MiB of memory at start/)
    }), 60_000)

  it.scopedLive("module mode: argv, env, stdin and the virtual filesystem", () =>
    Effect.gen(function*() {
      const backend = yield* WasmBackend.make(options({ mode: "module", modulePath: testModule("hello") }))
      assert.isFalse(backend.capabilities.files)
      const c = yield* connectNew(backend)
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

  it.effect("--wasm-path is required in module mode", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Effect.scoped(WasmBackend.make(options({ mode: "module" }))))
      assert.strictEqual(error.reason, "Invalid")
      assert.match(error.message, /--wasm-path/)
    }))
})

const snapshotPath = (id: string) => join(stateDir, "wasm-computers", `${id}.json`)

describeIf(built, "the WASI toolset (bash wasm/build.sh)")("wasm provider: computers and their snapshots", () => {
  it.scopedLive("a permanent computer is saved with its metadata; another server finds it stopped, starts it and sees its files", () =>
    Effect.gen(function*() {
      const id = computerId("keep")
      const first = yield* WasmBackend.make(options())
      const created = yield* first.create(metadata(id, false))
      assert.strictEqual(created.state, "running")
      assert.strictEqual(created.providerId, `wasm:${id}`)
      const header = JSON.parse(readFileSync(snapshotPath(id), "utf8"))
      assert.deepStrictEqual(header.labels, toLabels("dashed", metadata(id, false)), "the labels are ComputerMetadata's one encoding")
      const c = yield* first.connect(created)
      // Saved after the process that changed it: a server that dies now keeps the file.
      yield* ok(c, "echo saved > s.txt")
      const second = yield* WasmBackend.make(options())
      let found: ReadonlyArray<{ readonly state: string; readonly metadata: unknown }> = []
      for (let i = 0; i < 100; i++) {
        found = yield* second.find({ id })
        if (found.length === 1 && readFileSync(snapshotPath(id), "utf8").includes("s.txt")) break
        yield* Effect.sleep("20 millis")
      }
      assert.strictEqual(found.length, 1)
      assert.strictEqual(found[0]!.state, "stopped")
      assert.deepStrictEqual(found[0]!.metadata, metadata(id, false))
      assert.deepStrictEqual((yield* second.find({ temporary: false })).map((i) => i.metadata.id).filter((other) => other === id), [id])
      assert.deepStrictEqual(yield* second.find({ id, temporary: true }), [])
      const started = yield* second.start((yield* second.find({ id }))[0]!)
      assert.strictEqual(started.state, "running")
      assert.strictEqual(yield* ok(yield* second.connect(started), "cat s.txt"), "saved\n")
      assert.strictEqual((yield* second.find({ id }))[0]!.state, "running")
    }), 60_000)

  it.scopedLive("temporary computers live in memory only; a taken id is a Conflict, in memory or on disk", () =>
    Effect.gen(function*() {
      const backend = yield* WasmBackend.make(options())
      const id = computerId("tmp")
      const created = yield* backend.create(metadata(id))
      assert.isFalse(existsSync(snapshotPath(id)))
      assert.deepStrictEqual((yield* backend.find({ temporary: true })).filter((i) => i.metadata.id === id), [created])
      assert.deepStrictEqual(yield* backend.find({ id, temporary: false }), [])
      const again = yield* Effect.flip(backend.create(metadata(id)))
      assert.strictEqual(again.reason, "Conflict")
      const kept = computerId("kept")
      yield* backend.create(metadata(kept, false))
      const elsewhere = yield* WasmBackend.make(options())
      assert.strictEqual((yield* Effect.flip(elsewhere.create(metadata(kept)))).reason, "Conflict")
      // Removed, the id is free again; a temporary computer's removal leaves no file behind either way.
      yield* backend.remove(created)
      assert.deepStrictEqual(yield* backend.find({ id }), [])
      yield* backend.create(metadata(id))
    }), 60_000)

  it.scopedLive("suspend takes a permanent computer out of memory, up to date on disk; start reads it back", () =>
    Effect.gen(function*() {
      const backend = yield* WasmBackend.make(options())
      const id = computerId("sus")
      const created = yield* backend.create(metadata(id, false))
      yield* Effect.scoped(Effect.gen(function*() {
        const c = yield* backend.connect(created)
        yield* ok(c, "echo one > a.txt")
      }))
      yield* backend.suspend!(created)
      assert.strictEqual((yield* backend.find({ id }))[0]!.state, "stopped")
      const c = yield* backend.connect(yield* backend.start(created))
      assert.strictEqual(yield* ok(c, "cat a.txt"), "one\n")
      // Held by a connection, it stays in memory.
      yield* backend.suspend!(created)
      assert.strictEqual((yield* backend.find({ id }))[0]!.state, "running")
    }), 60_000)

  it.scopedLive("a snapshot of an earlier version (no labels) is a permanent computer; a damaged one is refused, its id kept", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => mkdir(join(stateDir, "wasm-computers"), { recursive: true }))
      const legacy = computerId("old")
      const file = Buffer.from("from before\n").toString("base64")
      writeFileSync(snapshotPath(legacy), JSON.stringify({ id: legacy, createdAt: "2025-05-05T00:00:00.000Z", fs: { d: { home: { d: { agent: { d: { "f.txt": { f: file } } } } } } } }))
      // Cut short (its header intact): listed, but it cannot be opened. Garbage: not ours to list.
      const damaged = computerId("bad")
      writeFileSync(snapshotPath(damaged), `{"id":"${damaged}","createdAt":"x","fs":{"d":{"home":`)
      const garbage = computerId("junk")
      writeFileSync(snapshotPath(garbage), "not a snapshot")
      const backend = yield* WasmBackend.make(options())
      const [old] = yield* backend.find({ id: legacy })
      assert.deepStrictEqual(old?.metadata, { id: legacy, temporary: false, image: "toolset", created: "2025-05-05T00:00:00.000Z", instance: "" })
      assert.strictEqual(yield* ok(yield* backend.connect(yield* backend.start(old!)), "cat f.txt"), "from before\n")
      const listed = (yield* backend.find({ temporary: false })).map((instance) => instance.metadata.id)
      assert.include(listed, legacy)
      assert.include(listed, damaged)
      assert.notInclude(listed, garbage)
      const [cut] = yield* backend.find({ id: damaged })
      const refused = yield* Effect.flip(backend.start(cut!))
      assert.strictEqual(refused.reason, "Failed")
      assert.match(refused.message, /damaged/)
      assert.strictEqual((yield* Effect.flip(backend.create(metadata(garbage, false)))).reason, "Conflict")
      // Never a path: an id that is not a slug finds nothing.
      assert.deepStrictEqual(yield* backend.find({ id: "../../etc/passwd" }), [])
    }), 60_000)

  it.scopedLive("a computer removed under a connection is lost: its processes end and new ones are refused", () =>
    Effect.gen(function*() {
      const backend = yield* WasmBackend.make(options())
      const id = computerId("gone")
      const created = yield* backend.create(metadata(id, false))
      const c = yield* backend.connect(created)
      const sleeper = yield* c.spawn(spec(["sh", "-c", "sleep 300"]))
      const ended = yield* Effect.fork(collect(sleeper))
      yield* backend.remove(created)
      assert.strictEqual(yield* c.lost.pipe(Effect.timeout("5 seconds")), "the computer was removed")
      assert.deepStrictEqual((yield* Fiber.join(ended).pipe(Effect.timeout("5 seconds"))).exit, { exitCode: null, signal: "SIGKILL" })
      assert.strictEqual((yield* Effect.flip(c.spawn(spec(["true"])))).reason, "NotFound")
      assert.isFalse(existsSync(snapshotPath(id)))
      assert.deepStrictEqual(yield* backend.find({ id }), [])
    }), 60_000)

  it.scopedLive("output nobody reads holds the writer back (bounded), and none of it is lost", () =>
    Effect.gen(function*() {
      const c = yield* openComputer()
      const process = yield* c.spawn(spec(["sh", "-c", "yes 0123456789abcdef | head -c 20000000; echo > /tmp/finished"]))
      // Unread, 20 MB cannot fit in the process's buffer and its writer's window: the writer waits.
      yield* Effect.sleep("1500 millis")
      assert.strictEqual(yield* ok(c, "ls /tmp"), "", "the writer is held back while its output is not read")
      const result = yield* collect(process)
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null }, result.stderr)
      assert.strictEqual(result.stdout.length, 20_000_000)
      assert.strictEqual(result.stdout.slice(0, 34), "0123456789abcdef\n0123456789abcdef\n")
      assert.strictEqual(yield* ok(c, "ls /tmp"), "finished\n")
    }), 60_000)
})

describeIf(built, "the WASI toolset (bash wasm/build.sh)")("wasm computers through the kernel", () => {
  const kernel = (dir: string) => Runtime.layer(Settings.make({ stateDir: dir, killGraceMs: 200 }), WasmBackend.layer(options({ stateDir: dir })))

  it.scopedLive("restart keeps the filesystem and its snapshot, factory reset erases both, delete removes the snapshot", () =>
    Effect.gen(function*() {
      const context = yield* Layer.build(kernel(stateDir))
      const { computers, files, processes } = yield* Effect.all({ computers: Computers, files: Files, processes: Processes }).pipe(Effect.provide(context))
      const id = computerId("life")
      yield* computers.create("s", { computer_id: id, temporary: false })
      yield* processes.exec("s", { command: "echo kept > k.txt", computer_id: id })
      yield* computers.restart("s", id)
      assert.strictEqual((yield* processes.exec("s", { command: "cat k.txt", computer_id: id })).stdout, "kept\n")
      assert.include(readFileSync(snapshotPath(id), "utf8"), Buffer.from("kept\n").toString("base64"))
      yield* computers.factoryReset("s", id)
      assert.strictEqual((yield* Effect.flip(files.read("s", { path: "k.txt", computer_id: id })))._tag, "FileNotFound")
      assert.notInclude(readFileSync(snapshotPath(id), "utf8"), Buffer.from("kept\n").toString("base64"))
      yield* computers.delete("s", id)
      assert.isFalse(existsSync(snapshotPath(id)))
    }), 60_000)

  it.scopedLive("a temporary computer goes with its session; the runtime refuses what WASI cannot do", () =>
    Effect.gen(function*() {
      const context = yield* Layer.build(kernel(stateDir))
      const { computers, processes } = yield* Effect.all({ computers: Computers, processes: Processes }).pipe(Effect.provide(context))
      const ran = yield* processes.exec("t", { command: "hostname" })
      assert.strictEqual(ran.stdout, `${ran.computer_id}\n`)
      assert.isFalse(existsSync(snapshotPath(ran.computer_id)))
      const tty = yield* Effect.flip(processes.spawn("t", { command: "true", tty: true }))
      assert.strictEqual(tty._tag, "Unsupported")
      yield* computers.release("t")
      assert.strictEqual((yield* Effect.flip(computers.get("u", ran.computer_id)))._tag, "ComputerNotFound")
    }), 60_000)
})
