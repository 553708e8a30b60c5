import Docker from "dockerode"
import { Effect, Stream } from "effect"
import { spawnSync } from "node:child_process"
import type { ComputerMetadata } from "../../src/domain/ComputerMetadata.js"
import * as DockerBackend from "../../src/layers/backends/docker/DockerBackend.js"
import * as ProcessOwner from "../../src/layers/server/ProcessOwner.js"
import { type Backend, type BackendProcess, type Connection, type ExitInfo, type Instance, type SpawnSpec, ownedEvents } from "../../src/services/Backend.js"

/**
 * The image the Docker and Podman tests use: its own name, never the server's default
 * (`debian:bookworm-slim`, which has neither python3 nor procps). Built locally by
 * scripts/docker-test-image.sh (debootstrap; no registry needed), rebuilt when its recipe changes.
 */
export const TEST_IMAGE = "kilntainers-test:bookworm"

/** The engines the tests drive: Docker, and Podman through its Docker-compatible API service. */
export type TestEngine = "docker" | "podman"

/** Where each engine answers: the backend's default sockets for root. */
export const SOCKETS: Readonly<Record<TestEngine, string>> = {
  docker: "/var/run/docker.sock",
  podman: "/run/podman/podman.sock"
}

/**
 * The engine of the backend's own suites (test/layers/backends/docker, the agent and security
 * suites): Docker, or Podman when KILNTAINERS_TEST_ENGINE=podman — so that CI runs the same suites
 * on Podman without a copy of them.
 */
export const TEST_ENGINE: TestEngine = process.env["KILNTAINERS_TEST_ENGINE"] === "podman" ? "podman" : "docker"

/** What a suite needs, as its skip (or, under CI=true, failure) message says it. */
export const requirement = (engine: TestEngine = TEST_ENGINE) =>
  engine === "docker"
    ? `a Docker engine with the ${TEST_IMAGE} test image (scripts/docker-test-image.sh)`
    : `Podman's API service at ${SOCKETS.podman} (podman system service) with the ${TEST_IMAGE} test image (scripts/docker-test-image.sh --engine podman)`

/** A dockerode client on the engine's default socket. */
export const docker = (engine: TestEngine = TEST_ENGINE) => new Docker({ socketPath: SOCKETS[engine] })

/**
 * The computer image (images/computer, built by `kilntainers image build`) the interactive tests
 * run: KILNTAINERS_COMPUTER_IMAGE, or the name the command gives it.
 */
export const COMPUTER_IMAGE = process.env["KILNTAINERS_COMPUTER_IMAGE"] ?? "kilntainers-computer:bookworm"

/**
 * An engine answers on its socket and has the image (by default the test image). Checked
 * synchronously (the result decides which describe blocks run) with a small node child that asks the
 * Engine API, with room for a busy engine (a slow answer under load is not a missing engine).
 */
export const engineWorks = (engine: TestEngine, image: string = TEST_IMAGE): boolean => {
  const probe = `
    const http = require("node:http")
    const get = (path) => new Promise((resolve) => {
      const req = http.get({ socketPath: ${JSON.stringify(SOCKETS[engine])}, path, timeout: 10_000 }, (res) => { res.resume(); resolve(res.statusCode) })
      req.on("error", () => resolve(0)); req.on("timeout", () => { req.destroy(); resolve(0) })
    })
    get("/_ping").then((ping) => ping === 200 ? get("/images/${encodeURIComponent(image)}/json") : 0).then((code) => process.exit(code === 200 ? 0 : 1))
  `
  const result = spawnSync(process.execPath, ["-e", probe], { stdio: "ignore", timeout: 30_000 })
  return result.status === 0
}

/** The test engine (Docker unless KILNTAINERS_TEST_ENGINE=podman) answers and has the test image. */
export const dockerWorks = engineWorks(TEST_ENGINE)

/** Backend options for tests: the local engine, the test image, no network. */
export const testOptions = (overrides: Partial<DockerBackend.DockerBackendOptions> = {}): DockerBackend.DockerBackendOptions => ({
  engine: TEST_ENGINE,
  dockerHost: undefined,
  image: TEST_IMAGE,
  cpu: undefined,
  memory: undefined,
  pidsLimit: 512,
  network: false,
  runFlags: [],
  ...overrides
})

/** The metadata the kernel would give a new computer of this test process (its owner: this process). */
export const testMetadata = (id: string, overrides: Partial<ComputerMetadata> = {}): ComputerMetadata => ({
  id,
  temporary: true,
  image: TEST_IMAGE,
  created: new Date().toISOString(),
  instance: `test-${process.pid}`,
  owner: ProcessOwner.self(),
  ...overrides
})

/**
 * A container made through the provider and connected to, as the kernel does it (create, then
 * connect in the Scope); removed when the Scope closes. For tests of the provider's own calls and of
 * the processes of one connection — lifecycle behaviour is tested through the kernel.
 */
export const dockerComputer = (backend: Backend["Type"], metadata: ComputerMetadata) =>
  Effect.gen(function*() {
    const instance: Instance = yield* Effect.acquireRelease(backend.create(metadata), (instance) => Effect.ignore(backend.remove(instance)))
    const connection: Connection = yield* backend.connect(instance)
    return { instance, connection }
  })

/** Computer ids unique to this run of a test file: `t<run>-<what>-<n>`. */
export const computerIds = () => {
  const round = Math.random().toString(36).slice(2, 8)
  let counter = 0
  return (what: string) => `t${round}-${what}-${counter++}`
}

/**
 * A running container under our name that is not one of our computers (its labels are not ours; it
 * carries only this test process's owner-pid, so that removeOurContainers finds it).
 */
export const foreignContainer = (id: string, labels: Record<string, string> = { other: "yes" }, engine: TestEngine = TEST_ENGINE) =>
  Effect.promise(async () => {
    const container = await docker(engine).createContainer({
      name: `kilntainer-${id}`,
      Image: TEST_IMAGE,
      Cmd: ["sleep", "infinity"],
      Labels: { ...labels, "kilntainers.owner-pid": String(process.pid) }
    })
    await container.start()
    return container
  })

/** Removes every container this test process made on the engine (its owner-pid label), whatever a failed case left. */
export const removeOurContainersOn = (engine: TestEngine) => async () => {
  if (engine === TEST_ENGINE ? !dockerWorks : !engineWorks(engine)) return
  const client = docker(engine)
  const containers = await client.listContainers({ all: true, filters: { label: [`kilntainers.owner-pid=${process.pid}`] } })
  await Promise.all(containers.map((c) => client.getContainer(c.Id).remove({ force: true }).catch(() => undefined)))
}

/** The same on the test engine (an `afterAll` hook as it is). */
export const removeOurContainers = removeOurContainersOn(TEST_ENGINE)

export interface Collected {
  readonly stdout: string
  readonly stderr: string
  readonly exit: ExitInfo | undefined
}

/** Every event of a process, gathered (strings copied out of each chunk before the next pull). */
export const collect = (process: BackendProcess) =>
  ownedEvents(process).pipe(
    Stream.runFold({ stdout: "", stderr: "", exit: undefined } as Collected, (acc, event) =>
      event._tag === "Exit"
        ? { ...acc, exit: event.exit }
        : event._tag === "Stdout"
        ? { ...acc, stdout: acc.stdout + Buffer.from(event.data).toString() }
        : { ...acc, stderr: acc.stderr + Buffer.from(event.data).toString() })
  )

export const PATH_ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }

export const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({
  argv,
  cwd: DockerBackend.HOME,
  env: PATH_ENV,
  ...extra
})

/** Runs a process of a connection to its end. */
export const run = (connection: Pick<Connection, "spawn">, argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.flatMap(connection.spawn(spec(argv, extra)), collect))

export const sh = (connection: Pick<Connection, "spawn">, script: string) => run(connection, ["sh", "-c", script])

/** Runs `effect` until its value is `ok` (bounded). */
export const eventually = <A, E>(effect: Effect.Effect<A, E>, ok: (a: A) => boolean, what: string, millis = 10_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + millis
    for (;;) {
      const value = yield* effect
      if (ok(value)) return value
      if (Date.now() > deadline) return yield* Effect.die(new Error(`timed out waiting for ${what}`))
      yield* Effect.sleep("100 millis")
    }
  })
