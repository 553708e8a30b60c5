import { afterAll, beforeAll } from "vitest"
import * as KubernetesBackend from "../../src/layers/backends/kubernetes/KubernetesBackend.js"
import type { KubeFake } from "../support/kube/KubeFake.js"
import { startKubeFake } from "../support/kube/KubeFake.js"
import { kubeFakeWorks, options, requirement } from "../layers/backends/kubernetes/KubeTestKit.js"
import { conformance } from "./Conformance.js"

// The Kubernetes backend against the fake cluster: agent-sandbox's controllers on the fake API
// server, each Sandbox's pod a Docker container of the test image, the real kt-agent in it
// reached by pods/exec over WebSocket.
let fake: KubeFake | undefined
beforeAll(async () => {
  if (kubeFakeWorks) fake = await startKubeFake()
}, 60_000)
afterAll(async () => {
  await fake?.close()
})

conformance("kubernetes", {
  backend: () => KubernetesBackend.layer(options(fake!)),
  available: kubeFakeWorks,
  requirement
})
