/**
 * The native helpers' check is bound to what runs (issue 19, "also seen"): the server checks
 * kt-agent and kt-sandbox against their manifest once, at startup, and from then on runs and copies
 * only the bytes it checked. A helper replaced after startup — rewritten in place as `cp` does, or
 * renamed over as `mv` does — changes nothing that runs, on the host (server as root and as an
 * unprivileged user) and on Docker (the same, the unprivileged server in the engine socket's group).
 * And on Docker, an agent that fails its check at startup is never replaced by plain Engine API
 * exec: every computer is refused, saying why.
 *
 * Each server runs from its own copy of the built package (dist/bin, native/build), so tampering
 * with it touches nothing else. The stand-ins only leave a marker file and exit.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { chmodSync, cpSync, existsSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { docker, dockerWorks, requirement, TEST_ENGINE, TEST_IMAGE } from "../support/Docker.js"
import { root as checkout } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"
import { dockerUnprivileged, type HostServer, type Mode, modes, requirements, requirementsMet, startHostServer } from "./HostServer.js"

const scratch = mkdtempSync(join(tmpdir(), "kt-helper-binding-"))
chmodSync(scratch, 0o755)
afterAll(() => rmSync(scratch, { recursive: true, force: true }))

let copies = 0
/** A copy of the built package that the unprivileged uid can run: its CLI, helpers and manifest. */
const packageCopy = () => {
  const root = join(scratch, `package-${copies++}`)
  cpSync(join(checkout, "package.json"), join(root, "package.json"))
  cpSync(join(checkout, "dist", "bin"), join(root, "dist", "bin"), { recursive: true })
  cpSync(join(checkout, "native", "build"), join(root, "native", "build"), { recursive: true })
  symlinkSync(join(checkout, "node_modules"), join(root, "node_modules"))
  chmodSync(root, 0o755)
  const manifest = JSON.parse(readFileSync(join(root, "native", "build", "manifest.json"), "utf8")) as {
    platforms: Record<string, { files: Record<string, { sha256: string }> }>
  }
  const files = manifest.platforms[`${process.platform}-${process.arch}`]!.files
  return {
    bin: join(root, "dist", "bin", "kilntainers.mjs"),
    agent: join(root, "native", "build", "kt-agent"),
    sandbox: join(root, "native", "build", "kt-sandbox"),
    sha256: { agent: files["kt-agent"]!.sha256, sandbox: files["kt-sandbox"]!.sha256 }
  }
}

/** `cp`: new bytes in the same file (inode). */
const rewriteInPlace = (path: string, text: string) => {
  const inode = statSync(path).ino
  writeFileSync(path, text)
  assert.strictEqual(statSync(path).ino, inode)
}

/** `mv`: a new file renamed over the old one. */
const renameOver = (path: string, text: string) => {
  writeFileSync(`${path}.new`, text, { mode: 0o755 })
  renameSync(`${path}.new`, path)
}

/** A directory anyone may write, for the stand-ins' markers. */
const markerDir = () => {
  const dir = mkdtempSync(join(scratch, "markers-"))
  chmodSync(dir, 0o777)
  return dir
}

describeIf(requirementsMet, requirements)("host: helpers replaced after startup change nothing that runs", () => {
  for (const mode of modes) {
    describe(`server run as ${mode === "root" ? "root" : "an unprivileged user"}`, () => {
      let server: HostServer
      let pkg: ReturnType<typeof packageCopy>
      let markers: string
      beforeAll(async () => {
        pkg = packageCopy()
        markers = markerDir()
        server = await startHostServer(mode, [], "host", pkg.bin)
        const before = await server.call("sandbox_exec", { command: "echo before", computer_id: "before" })
        assert.strictEqual(before.structured?.stdout, "before\n", before.text)
      }, 180_000)
      afterAll(async () => {
        await server?.close()
      })

      it("a new computer runs the agent and the launcher checked at startup, not the files now in the package", async () => {
        rewriteInPlace(pkg.agent, `#!/bin/sh\necho tampered > /home/agent/TAMPERED-AGENT\nexit 3\n`)
        renameOver(pkg.sandbox, `#!/bin/sh\necho tampered > ${markers}/TAMPERED-SANDBOX\nexit 125\n`)
        const after = await server.call("sandbox_exec", { command: "sha256sum /run/kt-agent /run/kt-sandbox", computer_id: "after" })
        assert.strictEqual(after.structured?.exit_code, 0, after.text)
        assert.strictEqual(after.structured.stdout, `${pkg.sha256.agent}  /run/kt-agent\n${pkg.sha256.sandbox}  /run/kt-sandbox\n`)
        assert.isFalse(existsSync(join(markers, "TAMPERED-SANDBOX")), "the replaced kt-sandbox ran")
        assert.isFalse(existsSync(join(server.stateDir, "computers", "after", "home", "TAMPERED-AGENT")), "the rewritten kt-agent ran")
      }, 180_000)
    })
  }
})

/** The CLI's flags for the engine the suites drive (Docker, or Podman with KILNTAINERS_TEST_ENGINE=podman). */
const dockerArgs = ["--engine", TEST_ENGINE, "--image", TEST_IMAGE]

/** The Docker server as root and, where the engine's socket has a group (always under CI=true), as an unprivileged user in it. */
const dockerModes = modes.filter((mode) => mode === "root" || (TEST_ENGINE === "docker" && dockerUnprivileged))
const serverName = (mode: Mode) => `server run as ${mode === "root" ? "root" : "an unprivileged user in the engine's group"}`

/** Containers of the computers a test made: removed whatever happens to its server. */
const made: Array<string> = []
afterAll(async () => {
  await Promise.all(made.map((id) => docker().getContainer(`kilntainer-${id}`).remove({ force: true }).catch(() => undefined)))
})
const computerId = (name: string) => {
  const id = `bind-${process.pid}-${name}`
  made.push(id)
  return id
}

describeIf(dockerWorks, requirement())("Docker: the agent put into containers is the one checked at startup", () => {
  for (const mode of dockerModes) {
    describe(serverName(mode), () => {
      let server: HostServer | undefined
      afterAll(async () => {
        await server?.close()
      })

      it("an agent rewritten after startup never reaches a container", async () => {
        const pkg = packageCopy()
        server = await startHostServer(mode, dockerArgs, "docker", pkg.bin)
        const before = await server.call("sandbox_exec", { command: "echo before", computer_id: computerId(`before-${mode}`) })
        assert.strictEqual(before.structured?.stdout, "before\n", before.text)
        rewriteInPlace(pkg.agent, `#!/bin/sh\necho tampered > /TAMPERED-AGENT\nexit 3\n`)
        // The shell's parent is the agent's shepherd (under Engine exec it would be outside the container).
        const after = await server.call("sandbox_exec", {
          command: "sha256sum /.kilntainers/kt-agent; cat /proc/$PPID/comm; ls /TAMPERED-AGENT 2>&1",
          computer_id: computerId(`after-${mode}`)
        })
        assert.strictEqual(
          after.structured?.stdout,
          `${pkg.sha256.agent}  /.kilntainers/kt-agent\nkt-shepherd\nls: cannot access '/TAMPERED-AGENT': No such file or directory\n`,
          after.text
        )
      }, 240_000)
    })
  }
})

describeIf(dockerWorks, requirement())("Docker: an agent that fails its check is never replaced by Engine exec", () => {
  for (const mode of dockerModes) {
    describe(serverName(mode), () => {
      let server: HostServer | undefined
      afterAll(async () => {
        await server?.close()
      })

      it("every computer is refused with a clear reason, and nothing runs in it", async () => {
        const pkg = packageCopy()
        rewriteInPlace(pkg.agent, `#!/bin/sh\nexit 3\n`)
        server = await startHostServer(mode, dockerArgs, "docker", pkg.bin)
        const id = computerId(`refused-${mode}`)
        const result = await server.call("sandbox_exec", { command: "echo ran", computer_id: id })
        assert.isTrue(result.isError, result.text)
        assert.notInclude(result.text, "ran\n")
        assert.include(result.text, `kilntainer-${id} is refused: its agent failed verification`)
        assert.include(result.text, "changed after it was built")
        assert.include(server.stderr(), "kt-agent failed its check")
      }, 240_000)
    })
  }
})
