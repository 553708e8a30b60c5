// Checkpoints and forks against the baseline they replace: creating a computer and repeating its
// setup (a Python virtual environment with pip: about two thousand files). Through the built CLI
// over stdio MCP, side by side in one run; prints times and ratios. Then ten forks at once.
//   npx vite-node bench/checkpoints.ts [host|docker] [rounds]
import { startServer } from "../test/support/McpHarness.js"

const backend = process.argv[2] ?? "host"
const rounds = Number(process.argv[3] ?? 3)
const SETUP = "python3 -m venv venv && venv/bin/python -c 'import pip' && echo ready"
const CHECK = "venv/bin/python -c 'import pip; print(\"pip\", pip.__version__ != \"\")'"

const server = await startServer([
  "--backend", backend,
  ...(backend === "docker" ? ["--image", "kilntainers-computer:bookworm"] : []),
  "--max-checkpoints", "50",
  "--log-level", "warning"
])

const time = async <A>(f: () => Promise<A>) => {
  const start = performance.now()
  const value = await f()
  return { ms: performance.now() - start, value }
}
const call = async (name: string, args: Record<string, unknown>) => {
  const result = await server.call(name, args)
  if (result.isError) throw new Error(`${name}: ${result.text}`)
  return result.structured
}
const median = (values: Array<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const baseline: Array<number> = []
const fork: Array<number> = []
const checkpointMs: Array<number> = []
for (let round = 0; round < rounds; round++) {
  // The baseline: a new computer, and the setup repeated in it.
  const plain = await time(async () => {
    const { computer_id } = await call("computer_create", {})
    const done = await call("sandbox_exec", { computer_id, command: SETUP, timeout: 300 })
    if (done.stdout !== "ready\n") throw new Error(`setup failed: ${done.stderr}`)
    return computer_id as string
  })
  baseline.push(plain.ms)
  const taken = await time(() => call("computer_checkpoint", { computer_id: plain.value }))
  checkpointMs.push(taken.ms)
  // The subject: a computer made from the checkpoint, ready to use.
  const forked = await time(async () => {
    const { computer_id } = await call("computer_create", { from_checkpoint: taken.value.checkpoint.checkpoint_id })
    const done = await call("sandbox_exec", { computer_id, command: CHECK })
    if (done.stdout !== "pip True\n") throw new Error(`fork is not set up: ${done.stdout} ${done.stderr}`)
    return computer_id as string
  })
  fork.push(forked.ms)
  await call("computer_delete", { computer_id: plain.value })
  await call("computer_delete", { computer_id: forked.value })
}

const source = await call("computer_create", {})
await call("sandbox_exec", { computer_id: source.computer_id, command: SETUP, timeout: 300 })
const checkpoint = (await call("computer_checkpoint", { computer_id: source.computer_id })).checkpoint.checkpoint_id
const ten = await time(() => Promise.all(Array.from({ length: 10 }, () => call("computer_create", { from_checkpoint: checkpoint }))))
const tenReady = await Promise.all(ten.value.map((made) => call("sandbox_exec", { computer_id: made.computer_id, command: CHECK })))
await server.client.close()

const line = (label: string, ms: number) => `${label.padEnd(46)} ${(ms / 1000).toFixed(2)} s`
process.stdout.write([
  `checkpoints bench, ${backend} backend, ${rounds} rounds (medians); setup = python3 -m venv (pip included)`,
  line("create + setup (baseline)", median(baseline)),
  line("checkpoint of the set-up computer", median(checkpointMs)),
  line("create from the checkpoint, ready", median(fork)),
  `fork vs baseline: ${(median(fork) / median(baseline)).toFixed(2)}x the time`,
  line("ten forks at once from one checkpoint (all made)", ten.ms),
  `ten forks ready: ${tenReady.filter((r) => r.stdout === "pip True\n").length}/10`,
  ""
].join("\n"))
