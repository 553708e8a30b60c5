// What the Kubernetes backend's tests share: a fake cluster per file (agent-sandbox's controllers,
// pods as Docker containers of the test image), backend options pointing at it, and kubectl 1.32.
import { spawnSync } from "node:child_process"
import type * as KubernetesBackend from "../../../../src/layers/backends/kubernetes/KubernetesBackend.js"
import { engineWorks, TEST_IMAGE } from "../../../support/Docker.js"
import type { KubeFake } from "../../../support/kube/KubeFake.js"

/** Docker (the fake's pods) with the test image. */
export const kubeFakeWorks = engineWorks("docker")
export const requirement = `a Docker engine with the ${TEST_IMAGE} test image (the fake cluster's pods are containers)`
/** kubectl (1.32 on these machines). */
export const kubectlWorks = spawnSync("kubectl", ["version", "--client"], { stdio: "ignore" }).status === 0

/** Backend options against the fake: its kubeconfig, the test image, quick leases and starts. */
export const options = (fake: KubeFake, overrides: Partial<KubernetesBackend.KubernetesBackendOptions> = {}): KubernetesBackend.KubernetesBackendOptions => ({
  kubeconfig: fake.kubeconfig,
  image: TEST_IMAGE,
  nodeSelector: {},
  warmPool: 0,
  network: false,
  requestTimeoutMs: 10_000,
  startTimeoutMs: 60_000,
  ...overrides
})
