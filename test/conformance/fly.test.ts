import { Redacted } from "effect"
import { afterAll, beforeAll } from "vitest"
import * as FlyBackend from "../../src/layers/backends/fly/FlyBackend.js"
import type { FlyFake } from "../support/FlyFake.js"
import { startFlyFake } from "../support/FlyFake.js"
import { bwrapWorks } from "../support/Requirements.js"
import { conformance } from "./Conformance.js"

const token = "fake-conformance-token"
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
  available: bwrapWorks,
  requirement: "bubblewrap (the Fly fake runs commands in it)"
})
