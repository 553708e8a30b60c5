import * as DockerBackend from "../../src/layers/backends/docker/DockerBackend.js"
import { engineWorks, requirement, TEST_IMAGE, type TestEngine, testOptions } from "../support/Docker.js"
import type { ConformanceTarget } from "./Conformance.js"

/**
 * The docker backend on one engine, for the conformance suite: Docker on its socket, or Podman
 * through its Docker-compatible API service — the same backend, options and test image on both.
 */
export const engineTarget = (engine: TestEngine): ConformanceTarget => ({
  backend: () => DockerBackend.layer(testOptions({ engine, dockerHost: undefined })),
  available: engineWorks(engine),
  requirement: requirement(engine),
  cli: { args: ["--backend", "docker", "--engine", engine, "--image", TEST_IMAGE] }
})
