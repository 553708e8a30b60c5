import { assert, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { execFile, spawnSync } from "node:child_process"
import { appendFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import { newKey } from "../../src/layers/backends/agent/AgentHandshake.js"
import * as AgentLauncher from "../../src/layers/backends/agent/AgentLauncher.js"
import * as NativeChecksums from "../../src/layers/backends/agent/NativeChecksums.js"
import { root } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"

// scripts/build-prebuilt.mjs and scripts/build-native.mjs, run in copies of the repository's native
// sources and scripts (the repository's own prebuilt/ and native/build/ are never touched).

const found = (command: string) => spawnSync(command, ["--version"], { stdio: "ignore" }).status === 0
const crossCompilers = found("x86_64-linux-gnu-gcc") && found("aarch64-linux-gnu-gcc") && found("qemu-aarch64-static")

const copyOfSources = (into: string) => {
  mkdirSync(join(into, "scripts"), { recursive: true })
  for (const script of ["native-sources.mjs", "build-native.mjs", "build-prebuilt.mjs"]) {
    cpSync(join(root, "scripts", script), join(into, "scripts", script))
  }
  cpSync(join(root, "native"), join(into, "native"), { recursive: true, filter: (path) => !path.startsWith(join(root, "native", "build")) })
  return into
}

/** Runs a script with node, without blocking the test worker (builds take seconds). */
const node = (cwd: string, args: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  new Promise<{ status: number | null; stderr: string }>((resolve) => {
    execFile(process.execPath, [...args], { cwd, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env }, timeout: 300_000 }, (error, _stdout, stderr) =>
      resolve({ status: error === null ? 0 : typeof error.code === "number" ? error.code : null, stderr }))
  })

interface Manifest {
  readonly sources: string
  readonly platforms: Record<string, { readonly dir: string; readonly files: Record<string, { readonly sha256: string }> }>
}
const manifestOf = (dir: string): Manifest => JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"))

/** e_machine of an ELF file, and whether it has a PT_INTERP program header (a dynamic executable). */
const elf = (path: string) => {
  const bytes = readFileSync(path)
  const phoff = Number(bytes.readBigUInt64LE(32))
  const interp = Array.from({ length: bytes.readUInt16LE(56) }, (_, i) => bytes.readUInt32LE(phoff + i * bytes.readUInt16LE(54))).includes(3)
  return { magic: bytes.subarray(0, 4).toString("latin1"), machine: bytes.readUInt16LE(18), interp }
}

describeIf(crossCompilers, "Debian's compilers for x86-64 and arm64 (gcc, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross) and qemu-user-static")(
  "the prebuilt native helpers",
  () => {
    let work = ""
    const epoch = { SOURCE_DATE_EPOCH: "1700000000" }
    let first: string
    let second: string
    beforeAll(async () => {
      work = mkdtempSync(join(tmpdir(), "kt-prebuilt-test-"))
      // Two checkouts at paths of different lengths, built separately.
      first = copyOfSources(join(work, "one"))
      second = copyOfSources(join(work, "a-second-checkout", "somewhere", "deeper"))
      for (const dir of [first, second]) {
        const built = await node(dir, ["scripts/build-prebuilt.mjs"], epoch)
        assert.strictEqual(built.status, 0, built.stderr)
      }
    }, 180_000)
    afterAll(() => {
      if (work !== "") rmSync(work, { recursive: true, force: true })
    })

    it("are byte-identical when built twice in different places, and hold no build path", () => {
      const a = manifestOf(join(first, "prebuilt"))
      const b = manifestOf(join(second, "prebuilt"))
      assert.deepStrictEqual(Object.keys(a.platforms).sort(), ["linux-arm64", "linux-x64"])
      assert.deepStrictEqual(a.platforms, b.platforms)
      for (const [platform, entry] of Object.entries(a.platforms)) {
        for (const name of ["kt-agent", "kt-sandbox"]) {
          const one = readFileSync(join(first, "prebuilt", entry.dir, name))
          assert.isTrue(one.equals(readFileSync(join(second, "prebuilt", entry.dir, name))), `${platform}/${name}`)
          const text = one.toString("latin1")
          for (const path of [work, root, "a-second-checkout", "kt-prebuilt-"]) assert.notInclude(text, path, `${platform}/${name}`)
        }
      }
      // The same sources in the repository give the same digest (the binaries are then the ones above,
      // with the same compilers).
      const ours = join(root, "prebuilt", "manifest.json")
      if (existsSync(ours)) {
        const repo = manifestOf(join(root, "prebuilt"))
        if (repo.sources === a.sources) assert.deepStrictEqual(repo.platforms, a.platforms)
      }
    })

    it("are static executables for their platform, and --check finds the build reproducible", async () => {
      const machines: Record<string, number> = { "linux-x64": 62, "linux-arm64": 183 }
      for (const platform of ["linux-x64", "linux-arm64"]) {
        for (const name of ["kt-agent", "kt-sandbox"]) {
          const header = elf(join(first, "prebuilt", platform, name))
          assert.deepStrictEqual(header, { magic: "\x7fELF", machine: machines[platform]!, interp: false }, `${platform}/${name}`)
        }
      }
      const checked = await node(first, ["scripts/build-prebuilt.mjs", "--check"], epoch)
      assert.strictEqual(checked.status, 0, checked.stderr)
      assert.match(checked.stderr, /linux-arm64: .*\(built twice: identical\)/)
    }, 120_000)

    it.scopedLive("the arm64 agent starts, runs a process and reports its exit (under qemu-aarch64)", () =>
      Effect.gen(function*() {
        const lookup = yield* NativeChecksums.find("host", first, "kt-agent", "linux-arm64")
        assert.strictEqual(lookup._tag, "Verified")
        const agent = lookup._tag === "Verified" ? lookup.path : ""
        const dir = mkdtempSync(join(work, "run-"))
        // seccomp filters are not emulated by qemu-user; everything else of the agent runs as on arm64.
        const place = { socket: join(dir, "agent.sock"), key: newKey() }
        yield* Effect.addFinalizer(() => AgentLauncher.stop("host", place))
        const client = yield* AgentLauncher.open("host", place, Effect.succeed({
          file: "qemu-aarch64-static",
          args: [agent, "--listen", place.socket, "--store", join(dir, "store"), "--no-seccomp"],
          cwd: dir,
          env: { PATH: "/usr/bin:/bin" }
        }), false)
        let output = ""
        const exited = yield* Deferred.make<number | null>()
        yield* client.spawn({ argv: ["sh", "-c", "echo hello from $(uname -m); exit 7"], cwd: dir, env: { PATH: "/usr/bin:/bin" } }, {
          onOutput: (_stream, _offset, data) => (output += Buffer.from(data).toString()),
          onExit: (exit) => Deferred.unsafeDone(exited, Effect.succeed(exit.exitCode)),
          onClosed: () => {}
        })
        const code = yield* Deferred.await(exited).pipe(Effect.timeout("30 seconds"))
        assert.strictEqual(code, 7)
        // The child is the host's own sh (qemu-user passes execve through), so uname says x86_64.
        assert.match(output, /^hello from /)
      }), 60_000)

    it("build-native uses fresh prebuilt helpers, compiles with --from-source or when the sources changed", async () => {
      const dir = copyOfSources(join(work, "native-build"))
      cpSync(join(first, "prebuilt"), join(dir, "prebuilt"), { recursive: true })
      const platform = NativeChecksums.platformKey()
      // No compiler at all: fresh prebuilt helpers are enough.
      const noCompiler = { CC: "/nonexistent/cc" }
      const usePrebuilt = await node(dir, ["scripts/build-native.mjs"], noCompiler)
      assert.strictEqual(usePrebuilt.status, 0, usePrebuilt.stderr)
      assert.include(usePrebuilt.stderr, `using the prebuilt helpers in prebuilt/${platform}`)
      assert.isFalse(existsSync(join(dir, "native", "build", "manifest.json")))

      const fromSource = await node(dir, ["scripts/build-native.mjs", "--from-source"])
      assert.strictEqual(fromSource.status, 0, fromSource.stderr)
      const local = manifestOf(join(dir, "native", "build"))
      assert.deepStrictEqual(Object.keys(local.platforms), [platform])
      assert.deepStrictEqual(Object.keys(local.platforms[platform]!.files).sort(), ["kt-agent", "kt-sandbox"])

      // The sources change: the prebuilt helpers are stale, and without a compiler that is an error.
      appendFileSync(join(dir, "native", "kt-sandbox.c"), "\n/* changed */\n")
      const stale = await node(dir, ["scripts/build-native.mjs"], noCompiler)
      assert.strictEqual(stale.status, 1)
      assert.include(stale.stderr, "no C compiler found")
      const rebuilt = await node(dir, ["scripts/build-native.mjs"])
      assert.strictEqual(rebuilt.status, 0, rebuilt.stderr)
      assert.notStrictEqual(manifestOf(join(dir, "native", "build")).sources, local.sources)
    }, 120_000)
  }
)
