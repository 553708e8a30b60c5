import { Redacted } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import * as FlyBackend from "../../src/layers/backends/fly/FlyBackend.js"
import type { FlyFake } from "../support/FlyFake.js"
import { startFlyFake } from "../support/FlyFake.js"
import { bwrapWorks } from "../support/Requirements.js"
import { conformance } from "./Conformance.js"

const token = "fake-conformance-token"
const stateDir = mkdtempSync(join(tmpdir(), "kt-conformance-fly-"))
let fake: FlyFake | undefined

beforeAll(async () => {
  if (bwrapWorks) fake = await startFlyFake({ token, app: "kt-conformance" })
})
afterAll(async () => {
  // Everything the suite made the backend ask, and the fake answer, followed Fly's published contract.
  const violations = fake?.violations.splice(0) ?? []
  await fake?.close()
  if (violations.length > 0) throw new Error(`Fly contract violations:\n${violations.join("\n")}`)
})

conformance("fly", {
  backend: () =>
    FlyBackend.layer({
      app: "kt-conformance",
      token: Redacted.make(token),
      image: FlyBackend.DEFAULT_IMAGE,
      region: undefined,
      cpuKind: "shared",
      cpus: 1,
      memoryMb: 512,
      rootfsSizeGb: undefined,
      apiUrl: fake?.url ?? "http://127.0.0.1:1",
      network: false
    }),
  settings: { stateDir },
  available: bwrapWorks,
  requirement: "bubblewrap (the Fly fake runs commands in it)",
  // Server A as the built CLI over the same fake (known once it runs), killed with SIGKILL.
  get cli() {
    return fake === undefined ? undefined : {
      args: ["--backend", "fly", "--fly-app", "kt-conformance", "--fly-api-url", fake.url, "--fly-memory", "512", "--state-dir", stateDir],
      env: { FLY_API_TOKEN: token }
    }
  }
})
