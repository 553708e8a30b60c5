import { Redacted } from "effect"
import { afterAll } from "vitest"
import * as E2BBackend from "../../src/layers/backends/e2b/E2BBackend.js"
import * as E2BFake from "../support/E2BFake.js"
import { bwrapWorks } from "../support/Requirements.js"
import { conformance } from "./Conformance.js"

// The real `e2b` SDK against the local fake (control plane + envd); its sandboxes run in bubblewrap.
const fake = bwrapWorks ? await E2BFake.start() : undefined
afterAll(async () => {
  await fake?.close()
})

conformance("e2b", {
  backend: () =>
    E2BBackend.layer({
      apiKey: Redacted.make(fake!.apiKey),
      template: "base",
      sandboxTimeoutSec: 300,
      metadata: {},
      envs: {},
      apiUrl: fake!.url,
      sandboxUrl: fake!.url,
      domain: undefined,
      home: E2BFake.FAKE_HOME
    }),
  // Server A of the durable cases: the built CLI over the same fake (the key in its environment).
  cli: fake === undefined ? undefined : {
    args: ["--backend", "e2b", "--e2b-api-url", fake.url, "--e2b-sandbox-url", fake.url, "--e2b-home", E2BFake.FAKE_HOME],
    env: { E2B_API_KEY: fake.apiKey }
  },
  available: bwrapWorks,
  requirement: "bubblewrap (the E2B fake runs commands in it)"
})
