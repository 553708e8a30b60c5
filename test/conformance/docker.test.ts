import { afterAll } from "vitest"
import * as DockerBackend from "../../src/layers/backends/DockerBackend.js"
import { docker, dockerWorks, TEST_IMAGE } from "../support/Docker.js"
import { conformance } from "./Conformance.js"

const instanceId = `conformance-${process.pid}`

conformance("docker", {
  backend: () =>
    DockerBackend.layer({
      engine: "docker",
      dockerHost: undefined,
      image: TEST_IMAGE,
      cpu: undefined,
      memory: undefined,
      pidsLimit: 512,
      network: false,
      runFlags: [],
      instanceId
    }),
  available: dockerWorks,
  requirement: "a Docker engine with the debian:bookworm-slim test image (scripts/docker-test-image.sh)"
})

afterAll(async () => {
  if (!dockerWorks) return
  const containers = await docker().listContainers({ all: true, filters: { label: [`kilntainers.instance=${instanceId}`] } })
  await Promise.all(containers.map((c) => docker().getContainer(c.Id).remove({ force: true }).catch(() => undefined)))
})
