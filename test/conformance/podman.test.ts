import { afterAll } from "vitest"
import { removeOurContainersOn } from "../support/Docker.js"
import { conformance } from "./Conformance.js"
import { engineTarget } from "./EngineTarget.js"

// The docker backend with --engine podman, against Podman's API service run as root
// (`podman system service --time=0 unix:///run/podman/podman.sock`; .ci/run starts it).
conformance("podman", engineTarget("podman"))

afterAll(removeOurContainersOn("podman"))
