// Exec round trip of `true` on a warm container, three ways, interleaved:
//   (1) a Docker connection's spawn, events drained to Exit (through the container's kt-agent),
//   (2) a bare Engine API exec issued here with dockerode: create + start + wait for the end + inspect,
//   (3) the `docker exec <container> true` CLI.
// p50/p99 of each and the ratios. Run after `npm run build` (uses dist/), or without a build:
// `npx vite-node bench/docker-exec.mjs`. Options: --runs N (default 100), --image IMAGE, --source (load
// src/ even when dist/ exists; needs vite-node).
import { execFile } from "node:child_process"
import Docker from "dockerode"
import { Effect, Exit, Scope } from "effect"

const load = (built, source) => (process.argv.includes("--source") ? source() : built().catch(source))
const DockerBackend = await load(
  () => import("../dist/src/layers/backends/docker/DockerBackend.js"),
  () => import("../src/layers/backends/docker/DockerBackend.ts")
)
const ProcessOwner = await load(() => import("../dist/src/layers/server/ProcessOwner.js"), () => import("../src/layers/server/ProcessOwner.ts"))

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? process.argv[i + 1] : fallback
}
const runs = Number(arg("--runs", "100"))
const image = arg("--image", "debian:bookworm-slim")
const env = { PATH: "/usr/local/bin:/usr/bin:/bin" }

const scope = Effect.runSync(Scope.make())
const backend = await Effect.runPromise(DockerBackend.make({
  engine: "docker",
  dockerHost: undefined,
  image,
  cpu: undefined,
  memory: undefined,
  pidsLimit: 512,
  network: false,
  runFlags: []
}))
// As the kernel does it: create the container, then connect (the agent starts); removed at the end.
const instance = await Effect.runPromise(backend.create({
  id: `bench-${process.pid}`,
  temporary: true,
  image,
  created: new Date().toISOString(),
  instance: `bench-${process.pid}`,
  // This process as its owner: a later server reaps the container if the bench dies before removing it.
  owner: ProcessOwner.self()
}))
const computer = await Effect.runPromise(Scope.extend(backend.connect(instance), scope))
const container = new Docker({ socketPath: "/var/run/docker.sock" }).getContainer(instance.providerId)

/** Reads a process's output to its end, as the kernel does: a loop over its pull. */
const drain = (p) => Effect.matchEffect(p.pull, { onFailure: () => Effect.void, onSuccess: () => Effect.suspend(() => drain(p)) })

const viaBackend = () =>
  Effect.runPromise(Effect.scoped(Effect.flatMap(
    computer.spawn({ argv: ["true"], cwd: "/home/agent", env }),
    drain
  )))

const bareExec = async () => {
  const exec = await container.exec({ Cmd: ["true"], AttachStdout: true, AttachStderr: true })
  const stream = await exec.start({})
  await new Promise((resolve, reject) => {
    stream.on("end", resolve)
    stream.on("error", reject)
    stream.resume()
  })
  const info = await exec.inspect()
  if (info.ExitCode !== 0) throw new Error(`exit code ${info.ExitCode}`)
}

const cli = () =>
  new Promise((resolve, reject) =>
    execFile("docker", ["exec", instance.providerId, "true"], (error) => (error ? reject(error) : resolve()))
  )

const time = async (f) => {
  const t = process.hrtime.bigint()
  await f()
  return Number(process.hrtime.bigint() - t) / 1e6
}
const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}

for (let i = 0; i < 10; i++) {
  await viaBackend()
  await bareExec()
  await cli()
}
const times = { backend: [], bare: [], cli: [] }
for (let i = 0; i < runs; i++) {
  times.bare.push(await time(bareExec))
  times.backend.push(await time(viaBackend))
  times.cli.push(await time(cli))
}
const row = (name, values) =>
  `${name.padEnd(44)} p50 ${percentile(values, 50).toFixed(2).padStart(8)} ms   p99 ${percentile(values, 99).toFixed(2).padStart(8)} ms`
const ratio = (a, b, p) => (percentile(a, p) / percentile(b, p)).toFixed(2)
console.log(`exec of \`true\` on a warm container (${runs} runs each, interleaved; image ${image})`)
console.log(row("(1) DockerBackend connection.spawn + events", times.backend))
console.log(row("(2) bare Engine API exec (dockerode)", times.bare))
console.log(row("(3) docker exec CLI", times.cli))
console.log(`ratios p50: backend/bare ${ratio(times.backend, times.bare, 50)}x, backend/cli ${ratio(times.backend, times.cli, 50)}x, cli/bare ${ratio(times.cli, times.bare, 50)}x`)
console.log(`ratios p99: backend/bare ${ratio(times.backend, times.bare, 99)}x, backend/cli ${ratio(times.backend, times.cli, 99)}x, cli/bare ${ratio(times.cli, times.bare, 99)}x`)

await Effect.runPromise(Scope.close(scope, Exit.void))
await Effect.runPromise(backend.remove(instance))
