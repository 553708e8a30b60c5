import { Effect } from "effect"
import { decoding, HostBackend, Processes, Runtime, Settings } from "kilntainers"

// A runtime over the host backend: each computer is a bubblewrap sandbox around a workspace.
const stateDir = "/tmp/kilntainers-example"
const kilntainers = Runtime.layer(
  Settings.make({ stateDir }),
  HostBackend.layer({ stateDir, network: false, sandbox: "bwrap" })
)

export const program = Effect.gen(function*() {
  // Inputs are plain values here, decoded (and checked) on the way in, as MCP decodes a tool's arguments.
  const processes = decoding(yield* Processes)
  // Calls name their session ("example") and may name a computer; it is created on first use.
  // One-shot command, like the sandbox_exec tool:
  const hello = yield* processes.exec("example", { computer_id: "my-app", command: "echo hello from $(hostname)" })
  // A long-running process: it moves to the background after 500 ms and keeps running.
  const server = yield* processes.spawn("example", { computer_id: "my-app", command: "sleep 1; echo ready", timeoutMs: 500 })
  const ready = yield* processes.wait("example", { id: server.pid, pattern: "ready", timeoutMs: 5_000 })
  return { hello: hello.stdout.trim(), backgrounded: server.status, ready: ready.outcome }
}).pipe(Effect.provide(kilntainers))

// Run it: npx tsx examples/library.ts
if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(program).then((result) => console.log(result))
}
