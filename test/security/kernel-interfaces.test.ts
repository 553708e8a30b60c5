/**
 * Kernel interfaces the agent's seccomp filter refuses to guests, as Docker's default profile does
 * (issue 19, "also seen"): AF_VSOCK sockets (vsock is not network-namespaced: it reaches the
 * hypervisor and its other guests), io_uring, and userfaultfd (syscall and /dev/userfaultfd). Tried
 * from inside a computer (fixtures/kernel-interfaces.c) on the host and on Docker with the server (the
 * built CLI) as root and as an unprivileged user, and on Docker through the backend itself with the
 * engine's profile and without it (seccomp=unconfined, which an operator may pass): the agent's own
 * filter must refuse them either way. Nothing here
 * changes the machine: an attempt that succeeds only makes a descriptor, closed at once.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import { spawnSync } from "node:child_process"
import { copyFileSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe } from "vitest"
import * as DockerBackend from "../../src/layers/backends/docker/DockerBackend.js"
import { Backend, type Connection, ownedEvents } from "../../src/services/Backend.js"
import { docker, dockerWorks, requirement, TEST_ENGINE, TEST_IMAGE, testOptions } from "../support/Docker.js"
import * as ProviderComputer from "../support/ProviderComputer.js"
import { describeIf } from "../support/Requirements.js"
import { dockerUnprivileged, type HostServer, modes, requirements, requirementsMet, startHostServer } from "./HostServer.js"

const dir = mkdtempSync(join(tmpdir(), "kt-kernel-interfaces-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const PROGRAM = join(dir, "kt-kernel-interfaces")
const compiled = spawnSync("cc", ["-static", "-O1", "-o", PROGRAM, join(import.meta.dirname, "fixtures", "kernel-interfaces.c")], { encoding: "utf8" })
if (compiled.status !== 0) throw new Error(`cannot compile the fixture: ${compiled.stderr || compiled.error}`)

const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/** What a guest gets, whoever runs the server and whatever the engine's own profile. */
const REFUSED = {
  vsock_stream: "EAFNOSUPPORT",
  vsock_dgram: "EAFNOSUPPORT",
  io_uring_setup: "ENOSYS",
  io_uring_enter: "ENOSYS",
  io_uring_register: "ENOSYS",
  userfaultfd_user_mode: "EPERM",
  userfaultfd: "EPERM",
  // Neither the host sandbox's /dev nor a container's has it.
  dev_userfaultfd: "ENOENT"
}

const parse = (stdout: string): Record<string, string> => {
  const line = stdout.split(/\r?\n/).find((l) => l.startsWith("RESULT"))
  assert.isDefined(line, `no result in: ${stdout}`)
  return JSON.parse(line!.slice("RESULT".length)) as Record<string, string>
}

describeIf(requirementsMet, requirements)("host computers cannot reach vsock, io_uring or userfaultfd", () => {
  for (const mode of modes) {
    describe(`server run as ${mode === "root" ? "root" : "an unprivileged user"}`, () => {
      let server: HostServer
      const id = "kernel-interfaces"
      beforeAll(async () => {
        server = await startHostServer(mode)
        const created = await server.call("computer_create", { computer_id: id })
        assert.isFalse(created.isError, created.text)
        copyFileSync(PROGRAM, join(server.stateDir, "computers", id, "home", "kt-kernel-interfaces"))
      }, 180_000)
      afterAll(async () => {
        await server?.close()
      })

      it("refuses each of them, and the computer keeps working", async () => {
        const tried = await server.call("sandbox_exec", { command: "/home/agent/kt-kernel-interfaces", computer_id: id })
        assert.strictEqual(tried.structured?.exit_code, 0, tried.text)
        assert.deepStrictEqual(parse(tried.structured.stdout as string), REFUSED)
        const after = await server.call("sandbox_exec", { command: "echo fine", computer_id: id })
        assert.strictEqual(after.structured?.stdout, "fine\n")
      }, 120_000)
    })
  }
})

describeIf(requirementsMet && dockerWorks, `${requirements}; ${requirement()}`)("Docker computers of the built CLI cannot reach vsock, io_uring or userfaultfd", () => {
  // The unprivileged server is in the engine socket's group (HostServer.ts; always under CI=true).
  for (const mode of modes.filter((one) => one === "root" || (TEST_ENGINE === "docker" && dockerUnprivileged))) {
    describe(`server run as ${mode === "root" ? "root" : "an unprivileged user in the engine's group"}`, () => {
      let server: HostServer
      const id = `kernel-interfaces-${mode}-${process.pid}`
      beforeAll(async () => {
        server = await startHostServer(mode, ["--engine", TEST_ENGINE, "--image", TEST_IMAGE], "docker")
        const created = await server.call("computer_create", { computer_id: id })
        assert.isFalse(created.isError, created.text)
        const archive = spawnSync("tar", ["-C", dir, "-cf", "-", "kt-kernel-interfaces"])
        await docker().getContainer(`kilntainer-${id}`).putArchive(archive.stdout, { path: "/" })
      }, 180_000)
      afterAll(async () => {
        await server?.close()
        await docker().getContainer(`kilntainer-${id}`).remove({ force: true }).catch(() => undefined)
      })

      it("refuses each of them, and the computer keeps working", async () => {
        const tried = await server.call("sandbox_exec", { command: "/kt-kernel-interfaces", computer_id: id })
        assert.strictEqual(tried.structured?.exit_code, 0, tried.text)
        assert.deepStrictEqual(parse(tried.structured.stdout as string), REFUSED)
        const after = await server.call("sandbox_exec", { command: "echo fine", computer_id: id })
        assert.strictEqual(after.structured?.stdout, "fine\n")
      }, 120_000)
    })
  }
})

const collect = (computer: Connection, argv: ReadonlyArray<string>) =>
  Effect.scoped(Effect.flatMap(computer.spawn({ argv, cwd: DockerBackend.HOME, env: { PATH } }), (process) =>
    Stream.runFold(ownedEvents(process), "", (acc, event) => (event._tag === "Exit" ? acc : acc + Buffer.from(event.data).toString()))))

describeIf(dockerWorks, requirement())("Docker computers cannot reach vsock, io_uring or userfaultfd", () => {
  const profiles = {
    "with the engine's default seccomp profile": [],
    "with the engine's profile off (seccomp=unconfined): the agent's filter alone": ["--security-opt", "seccomp=unconfined"]
  }
  for (const [name, runFlags] of Object.entries(profiles)) {
    it.scopedLive(name, () =>
      Effect.gen(function*() {
        const backend = yield* Effect.provide(
          Backend,
          Layer.fresh(DockerBackend.layer(testOptions({ runFlags })))
        )
        const { connection: computer, instance } = yield* ProviderComputer.open(backend, `ki-${runFlags.length}-${process.pid}`)
        const archive = spawnSync("tar", ["-C", dir, "-cf", "-", "kt-kernel-interfaces"])
        yield* Effect.promise(() => docker().getContainer(instance.providerId).putArchive(archive.stdout, { path: "/" }))
        assert.deepStrictEqual(parse(yield* collect(computer, ["/kt-kernel-interfaces"])), REFUSED)
        assert.strictEqual(yield* collect(computer, ["echo", "fine"]), "fine\n")
      }), 120_000)
  }
})
