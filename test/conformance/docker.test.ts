import { afterAll } from "vitest"
import { removeOurContainersOn } from "../support/Docker.js"
import { conformance } from "./Conformance.js"
import { engineTarget } from "./EngineTarget.js"

conformance("docker", engineTarget("docker"))

// Whatever a failed case left behind: every container this test process made says so in its labels.
afterAll(removeOurContainersOn("docker"))
