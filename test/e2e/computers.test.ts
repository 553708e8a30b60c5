import { assert, it } from "vitest"
import { existsSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { binPath, startServer } from "../support/McpHarness.js"
import { docker, dockerWorks, engineWorks, requirement, TEST_IMAGE } from "../support/Docker.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const providerHas = async (backend: string, stateDir: string, id: string) => {
  if (backend === "host") return existsSync(join(stateDir, "computers", id))
  const found = await docker(backend === "podman" ? "podman" : "docker").listContainers({
    all: true,
    filters: { label: [`kilntainers.computer-id=${id}`] }
  })
  return found.length > 0
}

// The container engines run the test image, never the default image's name.
const backends = [
  { name: "docker", args: ["--backend", "docker", "--image", TEST_IMAGE], available: engineWorks("docker"), requirement: requirement("docker") },
  {
    name: "podman",
    args: ["--backend", "docker", "--engine", "podman", "--image", TEST_IMAGE],
    available: engineWorks("podman"),
    requirement: requirement("podman")
  },
  { name: "host", args: ["--backend", "host"], available: bwrapWorks, requirement: "bubblewrap" }
] as const

for (const backend of backends) {
  describeIf(backend.available && existsSync(binPath), `${backend.requirement} and a built CLI`)(
    `named computers over stdio MCP (${backend.name})`,
    () => {
      it("lists the computer tools", async () => {
        const server = await startServer([...backend.args])
        try {
          const { tools } = await server.client.listTools()
          const names = tools.map((t) => t.name)
          for (const name of ["computer_list", "computer_create", "computer_restart", "computer_factory_reset", "computer_delete", "computer_dashboard", "file_read", "file_write"]) {
            assert.include(names, name)
          }
        } finally {
          await server.client.close()
        }
      })

      it("two sessions each get their own default computer, and temporary ones go with their session", async () => {
        const stateDir = mkdtempSync(join(tmpdir(), "kt-e2e-shared-"))
        const one = await startServer([...backend.args, "--state-dir", stateDir])
        const two = await startServer([...backend.args, "--state-dir", stateDir])
        try {
          const a = await one.call("sandbox_exec", { command: "echo one > mine.txt; hostname" })
          const b = await two.call("sandbox_exec", { command: "cat mine.txt 2>&1; hostname" })
          assert.isFalse(a.isError, a.text)
          assert.notStrictEqual(a.structured.computer_id, b.structured.computer_id)
          assert.match(b.structured.stdout, /No such file/)
          const again = await one.call("sandbox_exec", { command: "cat mine.txt" })
          assert.strictEqual(again.structured.stdout, "one\n")
          assert.strictEqual(again.structured.computer_id, a.structured.computer_id)
          const listed = await two.call("computer_list", {})
          assert.isTrue(listed.structured.computers.some((c: any) => c.computer_id === b.structured.computer_id))
          assert.isFalse(listed.structured.computers.some((c: any) => c.computer_id === a.structured.computer_id), "private to session one")
          const denied = await two.call("sandbox_exec", { computer_id: a.structured.computer_id, command: "true" })
          assert.isTrue(denied.isError)
          assert.isTrue(await providerHas(backend.name, stateDir, a.structured.computer_id))
          await one.client.close()
          // the first session's temporary computer is gone from the provider once its session ended
          let gone = false
          for (let i = 0; i < 75 && !gone; i++) {
            gone = !(await providerHas(backend.name, stateDir, a.structured.computer_id))
            if (!gone) await new Promise((r) => setTimeout(r, 200))
          }
          assert.isTrue(gone, "temporary computer removed with its session")
        } finally {
          await one.client.close().catch(() => undefined)
          await two.client.close()
        }
      }, 120_000)

      it("a permanent computer is re-attached by a second server process", async () => {
        const stateDir = mkdtempSync(join(tmpdir(), "kt-e2e-perm-"))
        const id = `e2e-perm-${backend.name}-${process.pid}`
        const first = await startServer([...backend.args, "--state-dir", stateDir])
        try {
          const created = await first.call("computer_create", { computer_id: id, temporary: false })
          assert.isFalse(created.isError, created.text)
          assert.deepInclude(created.structured, { ok: true, computer_id: id, temporary: false })
          const wrote = await first.call("file_write", { computer_id: id, temporary: false, path: "state.txt", content: "from the first server" })
          assert.isFalse(wrote.isError, wrote.text)
        } finally {
          await first.client.close()
        }
        const second = await startServer([...backend.args, "--state-dir", stateDir])
        try {
          const listed = await second.call("computer_list", {})
          const found = listed.structured.computers.find((c: any) => c.computer_id === id)
          assert.isDefined(found, "the permanent computer is listed by the new server")
          assert.isFalse(found.temporary)
          const read = await second.call("file_read", { computer_id: id, temporary: false, path: "state.txt" })
          assert.strictEqual(read.structured.content, "from the first server")
          const restarted = await second.call("computer_restart", { computer_id: id })
          assert.isFalse(restarted.isError, restarted.text)
          const still = await second.call("sandbox_exec", { computer_id: id, temporary: false, command: "cat state.txt" })
          assert.strictEqual(still.structured.stdout, "from the first server")
          const reset = await second.call("computer_factory_reset", { computer_id: id })
          assert.isFalse(reset.isError, reset.text)
          const erased = await second.call("sandbox_exec", { computer_id: id, temporary: false, command: "test -e state.txt && echo present || echo erased" })
          assert.strictEqual(erased.structured.stdout, "erased\n")
          const deleted = await second.call("computer_delete", { computer_id: id })
          assert.deepStrictEqual(deleted.structured, { ok: true, computer_id: id, deleted: true })
          const after = await second.call("computer_list", {})
          assert.isFalse(after.structured.computers.some((c: any) => c.computer_id === id))
          const bad = await second.call("computer_restart", { computer_id: "Not Valid" })
          assert.isTrue(bad.isError)
          const unknown = await second.call("computer_delete", { computer_id: "no-such-computer" })
          assert.isTrue(unknown.isError)
          assert.match(unknown.text, /no computer with id/)
        } finally {
          await second.client.close()
        }
      }, 180_000)
    }
  )
}

describeIf(dockerWorks && bwrapWorks && existsSync(binPath), "a Docker engine, bubblewrap and a built CLI")("the default backend", () => {
  it("is docker when an engine answers, else host, and the server says which on stderr", async () => {
    const withEngine = await startServer(["--image", TEST_IMAGE])
    try {
      const result = await withEngine.call("sandbox_exec", { command: "test -f /.dockerenv && echo container || echo other" })
      assert.strictEqual(result.structured.stdout, "container\n")
      assert.match(withEngine.stderr(), /backend: docker/)
    } finally {
      await withEngine.client.close()
    }
    const without = await startServer(["--docker-host", "unix:///nonexistent/docker.sock"])
    try {
      const listed = await without.call("sandbox_exec", { command: "echo hi" })
      assert.strictEqual(listed.structured.stdout, "hi\n")
      assert.match(without.stderr(), /backend: host/)
    } finally {
      await without.client.close()
    }
  }, 60_000)
})
