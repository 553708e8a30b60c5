import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, relative } from "node:path"
import { binPath, root, startServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

// The package as a user installs it: `npm run test:package` packs it, installs the tarball into an
// empty directory with a PATH on which cc, gcc and clang fail, and points these tests (and the
// end-to-end suites) at the installed copy (KILNTAINERS_TEST_INSTALL, KILNTAINERS_TEST_TARBALL,
// KILNTAINERS_TEST_BIN); without them there is nothing to test (a failure under CI=true).
const install = process.env.KILNTAINERS_TEST_INSTALL
const tarball = process.env.KILNTAINERS_TEST_TARBALL
const installed = install !== undefined ? join(install, "node_modules", "kilntainers") : ""
const platform = `${process.platform}-${process.arch}`

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex")

interface Manifest {
  readonly platforms: Record<string, { readonly dir: string; readonly files: Record<string, { readonly sha256: string }> }>
}

/**
 * Starts the installed CLI (or a copy of it) as an MCP client would and runs one command: a server
 * whose backend cannot start answers at once but refuses every call with the reason (and says it on
 * stderr), running nothing.
 */
const refusedCall = async (bin: string) => {
  const state = mkdtempSync(join(tmpdir(), "kt-refused-"))
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [bin, "--backend", "host", "--state-dir", state],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" },
    stderr: "pipe"
  })
  let stderr = ""
  transport.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
  const client = new Client({ name: "kilntainers-refused-test", version: "1.0.0" })
  try {
    await client.connect(transport, { timeout: 60_000 })
    const result = await client.callTool({ name: "sandbox_exec", arguments: { command: "echo should not run" } })
    const text = (result.content as Array<{ readonly text?: string }>).map((part) => part.text ?? "").join("\n")
    for (let i = 0; i < 50 && !stderr.includes("cannot start"); i++) await new Promise((resolve) => setTimeout(resolve, 100))
    return { isError: result.isError === true, text, stderr }
  } finally {
    await client.close()
    rmSync(state, { recursive: true, force: true })
  }
}

/** The pids of every descendant of `pid`. */
const descendants = (pid: number): Array<number> => {
  const children = new Map<number, Array<number>>()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const ppid = Number(/^PPid:\s+(\d+)/m.exec(readFileSync(`/proc/${entry}/status`, "utf8"))?.[1])
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)])
    } catch {
      // gone while we looked
    }
  }
  const found: Array<number> = []
  const walk = (p: number) => {
    for (const child of children.get(p) ?? []) {
      found.push(child)
      walk(child)
    }
  }
  walk(pid)
  return found
}

describeIf(install !== undefined && tarball !== undefined && process.env.KILNTAINERS_TEST_BIN !== undefined, "an installed package (npm run test:package)")("the installed package", () => {
  it("is a copy outside this checkout, installed where no C compiler works", () => {
    assert.isTrue(existsSync(binPath), binPath)
    assert.isTrue(relative(root, binPath).startsWith(".."), `${binPath} is inside the checkout`)
    assert.strictEqual(binPath, join(installed, "dist", "bin", "kilntainers.mjs"))
    for (const compiler of ["cc", "gcc", "clang"]) {
      const result = spawnSync(compiler, ["--version"], { encoding: "utf8" })
      assert.notStrictEqual(result.status, 0, `${compiler} works on this PATH`)
    }
  })

  it("holds what runs without a compiler, and nothing test-only or secret", () => {
    const listing = spawnSync("tar", ["-tzf", tarball!], { encoding: "utf8" })
    assert.strictEqual(listing.status, 0)
    const paths = listing.stdout.trim().split("\n").map((line) => line.replace(/^package\//, ""))
    const allowed = [
      /^package\.json$/,
      /^README\.md$/,
      /^LICEN[CS]E(\.md)?$/,
      /^dist\/src\/.+\.(js|d\.ts)$/,
      /^dist\/src\/dashboard\/(dashboard|terminal)\.html$/,
      /^dist\/bin\/[\w./-]+\.mjs$/,
      /^images\/computer\/[\w.-]+$/,
      /^native\/kt-(agent|sandbox)\.c$/,
      /^native\/kt-(agent|sandbox)\/[a-z0-9-]+\.[ch]$/,
      /^prebuilt\/(manifest\.json|NOTICE\.md)$/,
      /^prebuilt\/linux-(x64|arm64)\/kt-(agent|sandbox)$/,
      /^scripts\/(build-native|native-sources)\.mjs$/,
      /^wasm\/build\/(toolset\.json|toybox\.wasm|awk\.wasm)$/,
      /^wasm\/build\/licences\/[a-z-]+\.(LICENSE|copyright)$/
    ]
    const unexpected = paths.filter((path) => !allowed.some((pattern) => pattern.test(path)))
    assert.deepStrictEqual(unexpected, [])
    for (const needed of ["prebuilt/linux-x64/kt-agent", "prebuilt/linux-arm64/kt-sandbox", "wasm/build/toybox.wasm", "wasm/build/licences/original-awk.LICENSE", "dist/bin/kilntainers.mjs", "dist/src/dashboard/dashboard.html", "dist/src/dashboard/terminal.html"]) {
      assert.include(paths, needed)
    }
    // Nothing was compiled at install: the only helpers are the prebuilt ones.
    assert.isFalse(existsSync(join(installed, "native", "build")))
    const manifest: Manifest = JSON.parse(readFileSync(join(installed, "prebuilt", "manifest.json"), "utf8"))
    assert.deepStrictEqual(Object.keys(manifest.platforms).sort(), ["linux-arm64", "linux-x64"])
    for (const [name, record] of Object.entries(manifest.platforms["linux-x64"]!.files)) {
      assert.strictEqual(sha256(readFileSync(join(installed, "prebuilt", "linux-x64", name))), record.sha256, name)
    }
  })

  it("runs as `npx kilntainers` from the directory it was installed in", () => {
    const help = spawnSync("npx", ["--no-install", "kilntainers", "--help"], { cwd: install!, encoding: "utf8", timeout: 60_000 })
    assert.strictEqual(help.status, 0, help.stderr)
    assert.match(help.stdout + help.stderr, /--backend/)
  })

  describeIf(bwrapWorks, "bubblewrap")("on the host backend", () => {
    it("runs its processes through the prebuilt agent, byte for byte the one in the manifest", async () => {
      const server = await startServer(["--backend", "host"])
      try {
        const result = await server.call("sandbox_exec", { command: "echo installed; uname -s" })
        assert.isFalse(result.isError, result.text)
        assert.strictEqual(result.structured.stdout, "installed\nLinux\n")
        // The agent runs from a copy in the sandbox's own tmpfs; its bytes are the prebuilt ones.
        const manifest: Manifest = JSON.parse(readFileSync(join(installed, "prebuilt", "manifest.json"), "utf8"))
        const expected = manifest.platforms[platform]!.files["kt-agent"]!.sha256
        const agents = descendants(server.pid!).filter((pid) => {
          try {
            // A copy in the sandbox's tmpfs, unlinked once it runs: "/run/kt-agent (deleted)".
            return /\/kt-agent( \(deleted\))?$/.test(readlinkSync(`/proc/${pid}/exe`))
          } catch {
            return false
          }
        })
        assert.isAtLeast(agents.length, 1, "no kt-agent below the server")
        for (const pid of agents) assert.strictEqual(sha256(readFileSync(`/proc/${pid}/exe`)), expected)
      } finally {
        await server.client.close()
      }
    })

    it("serves MCP over stdio when a client starts it the one-line way, npx -y <package>", async () => {
      const dir = mkdtempSync(join(tmpdir(), "kt-npx-"))
      // What an MCP client's configuration runs: {"command": "npx", "args": ["-y", "kilntainers"]},
      // with the packed tarball standing in for the registry's copy.
      const transport = new StdioClientTransport({
        command: "npx",
        args: ["-y", `--package=${tarball}`, "kilntainers", "--backend", "host", "--state-dir", join(dir, "state")],
        cwd: dir,
        env: Object.fromEntries(Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined)),
        stderr: "pipe"
      })
      const client = new Client({ name: "kilntainers-npx-test", version: "1.0.0" })
      try {
        await client.connect(transport, { timeout: 180_000 })
        const result = await client.callTool({ name: "sandbox_exec", arguments: { command: "echo started by npx" } })
        assert.isNotTrue(result.isError, JSON.stringify(result.content))
        assert.strictEqual((result.structuredContent as { stdout: string }).stdout, "started by npx\n")
      } finally {
        await client.close()
        rmSync(dir, { recursive: true, force: true })
      }
    }, 240_000)

    describe("a changed copy of the package", () => {
      let work = ""
      beforeAll(() => {
        work = mkdtempSync(join(tmpdir(), "kt-installed-copy-"))
      })
      /** A copy of the installed package beside the install's node_modules, with one file changed. */
      const copyWith = (change: (pkg: string) => void) => {
        const dir = mkdtempSync(join(work, "copy-"))
        cpSync(installed, join(dir, "kilntainers"), { recursive: true })
        symlinkSync(join(install!, "node_modules"), join(dir, "node_modules"))
        change(join(dir, "kilntainers"))
        return join(dir, "kilntainers", "dist", "bin", "kilntainers.mjs")
      }

      it("refuses to run a helper whose SHA-256 differs from the manifest, and says so", async () => {
        for (const helper of ["kt-agent", "kt-sandbox"]) {
          const bin = copyWith((pkg) => {
            const path = join(pkg, "prebuilt", platform, helper)
            const bytes = readFileSync(path)
            bytes[bytes.length - 100] = bytes[bytes.length - 100]! ^ 0xff
            writeFileSync(path, bytes)
          })
          const result = await refusedCall(bin)
          assert.isTrue(result.isError, helper)
          assert.notInclude(result.text, "should not run")
          const refusal = new RegExp(`refusing to run \\S+/prebuilt/${platform}/${helper}: its SHA-256 is [0-9a-f]{64}, but prebuilt/manifest.json records`)
          assert.match(result.text, refusal)
          assert.match(result.stderr, refusal)
        }
      }, 120_000)

      it("without prebuilt helpers for this machine, says which platforms have them and why it could not build", async () => {
        const bin = copyWith((pkg) => {
          const path = join(pkg, "prebuilt", "manifest.json")
          const manifest = JSON.parse(readFileSync(path, "utf8"))
          delete manifest.platforms[platform]
          writeFileSync(path, JSON.stringify(manifest))
        })
        const result = await refusedCall(bin)
        assert.isTrue(result.isError)
        for (const said of [result.text, result.stderr]) {
          assert.match(said, new RegExp(`no native helpers for ${platform}: the package ships them prebuilt for linux-x64 and linux-arm64`))
          assert.match(said, /Building them failed: .*compiling kt-(agent|sandbox) failed/s)
          assert.match(said, /no compiler on this machine/)
        }
      }, 120_000)

      afterAll(() => {
        if (work !== "") rmSync(work, { recursive: true, force: true })
      })
    })
  })
})
