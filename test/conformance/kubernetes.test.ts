import { afterAll, beforeAll } from "vitest"
import * as KubernetesBackend from "../../src/layers/backends/kubernetes/KubernetesBackend.js"
import { TEST_IMAGE } from "../support/Docker.js"
import type { KubeFake } from "../support/kube/KubeFake.js"
import { startKubeFake } from "../support/kube/KubeFake.js"
import { kubeFakeWorks, options, requirement } from "../layers/backends/kubernetes/KubeTestKit.js"
import { conformance } from "./Conformance.js"

// The Kubernetes backend against the fake cluster: agent-sandbox's controllers on the fake API
// server, each Sandbox's pod a Docker container of the test image, the real kt-agent in it
// reached by pods/exec over WebSocket; a permanent computer's agent is durable, so the durable
// cases run too.
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
  requirement,
  // Read once the fake runs (server A of the durable cases is the built CLI on its kubeconfig).
  get cli() {
    return fake === undefined ? undefined : { args: ["--backend", "kubernetes", "--k8s-kubeconfig", fake.kubeconfig, "--k8s-image", TEST_IMAGE] }
  }
})
