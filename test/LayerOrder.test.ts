/**
 * The layer order of ARCHITECTURE.md ("The layers, bottom to top"), checked on every import of every
 * module in src: a module imports only from its own level or from levels below it, and never from a
 * sibling at its own level (one provider from another, tracing from the server facts).
 */
import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join, normalize, relative } from "node:path"
import { root } from "./support/McpHarness.js"

/**
 * Bottom to top. A level is a list of sibling groups; a group is the path prefixes (relative to
 * src, `/` ending a folder) of its modules. The longest matching prefix places a module.
 */
const LEVELS: ReadonlyArray<ReadonlyArray<readonly [string, ReadonlyArray<string>]>> = [
  [["domain", ["domain/"]]],
  [["services", ["services/"]]],
  [["actors", ["actors/"]]],
  [["server facts", ["layers/server/"]], ["tracing", ["layers/tracing/"]]],
  [["egress", ["layers/egress/"]]],
  [["backends' shared parts", ["layers/backends/ProcessEvents.ts", "layers/backends/WrapperHeader.ts", "layers/backends/HandedDescriptors.ts"]]],
  [["the held mounts", ["layers/backends/mounts/"]]],
  [["the in-computer agent's client", ["layers/backends/agent/"]]],
  ["host", "docker", "e2b", "fly", "kubernetes", "modal", "wasm"].map((name) => [name, [`layers/backends/${name}/`]] as const),
  [["kernel layers", ["layers/"]]],
  [["mcp", ["layers/mcp/"]]],
  [["composition root", ["layers/Main.ts"]]],
  [["cli", ["cli/"]]],
  [["library exports", ["index.ts"]]]
]

/** The browser app: bundled on its own, it imports nothing of the server and the server none of it. */
const ISLAND = "dashboard/"

interface Place {
  readonly level: number
  readonly group: string
}

const placeOf = (module: string): Place | undefined => {
  let best: { readonly place: Place; readonly length: number } | undefined
  LEVELS.forEach((groups, level) => {
    for (const [group, prefixes] of groups) {
      for (const prefix of prefixes) {
        const matches = prefix.endsWith("/") ? module.startsWith(prefix) : module === prefix
        if (matches && (best === undefined || prefix.length > best.length)) best = { place: { level, group }, length: prefix.length }
      }
    }
  })
  return best?.place
}

const src = join(root, "src")

const modules = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return modules(path)
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") ? [relative(src, path)] : []
  })

/** Relative specifiers of static imports, re-exports and dynamic imports (type-only ones included: an arrow is an arrow). */
const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)["'](\.{1,2}\/[^"']+)["']/gm

const importsOf = (module: string): Array<string> => {
  const text = readFileSync(join(src, module), "utf8")
  return [...text.matchAll(SPECIFIER)].map((match) =>
    normalize(join(dirname(module), match[1]!)).replace(/\.js$/, ".ts").replace(/\.mjs$/, ".mts")
  )
}

/** Why `from` may not import `to`, or undefined when it may. */
const violation = (from: string, to: string): string | undefined => {
  if (from.startsWith(ISLAND) || to.startsWith(ISLAND)) {
    return from.startsWith(ISLAND) === to.startsWith(ISLAND) ? undefined : "the dashboard and the server share no module"
  }
  const a = placeOf(from)
  const b = placeOf(to)
  if (a === undefined || b === undefined) return `${a === undefined ? from : to} has no place in the layer order`
  if (b.level > a.level) return `${a.group} imports from ${b.group}, a layer above it`
  if (b.level === a.level && b.group !== a.group) return `${a.group} imports from ${b.group}, a sibling`
  return undefined
}

describe("the layer order", () => {
  it("every module of src has a place in it", () => {
    const placeless = modules(src).filter((module) => !module.startsWith(ISLAND) && placeOf(module) === undefined)
    assert.deepStrictEqual(placeless, [])
  })

  it("no module imports from a layer above it or from a sibling", () => {
    const found = modules(src).flatMap((module) =>
      importsOf(module).flatMap((target) => {
        const why = violation(module, target)
        return why === undefined ? [] : [`${module} → ${target}: ${why}`]
      })
    )
    assert.deepStrictEqual(found, [])
  })

  it("refuses the arrows it is there to refuse", () => {
    assert.match(violation("actors/ComputerActor.ts", "layers/tracing/Tracing.ts") ?? "", /a layer above/)
    assert.match(violation("layers/egress/Egress.ts", "layers/backends/agent/Relay.ts") ?? "", /a layer above/)
    assert.match(violation("layers/backends/host/Cgroups.ts", "layers/backends/docker/DockerRunFlags.ts") ?? "", /a sibling/)
    assert.match(violation("layers/backends/kubernetes/KubeConnection.ts", "layers/backends/docker/DockerAgent.ts") ?? "", /a sibling/)
    assert.match(violation("services/Processes.ts", "actors/ProcessActor.ts") ?? "", /a layer above/)
    assert.match(violation("layers/backends/docker/DockerExec.ts", "layers/ComputerRegistry.ts") ?? "", /a layer above/)
    assert.match(violation("layers/ProcessSupervisor.ts", "layers/mcp/Tool.ts") ?? "", /a layer above/)
    assert.isUndefined(violation("layers/backends/docker/DockerAgent.ts", "layers/backends/agent/AgentClient.ts"))
    assert.isUndefined(violation("layers/Main.ts", "layers/backends/fly/FlyBackend.ts"))
    assert.isUndefined(violation("layers/processes/Exec.ts", "layers/ProcessSupervisor.ts"))
  })
})
