import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as HostBackend from "../../src/layers/backends/host/HostBackend.js"
import { bwrapWorks } from "../support/Requirements.js"
import { conformance } from "./Conformance.js"

const stateDir = mkdtempSync(join(tmpdir(), "kt-conformance-host-"))

conformance("host", {
  backend: () => HostBackend.layer({ stateDir, network: false, sandbox: "bwrap" }),
  settings: { stateDir },
  available: bwrapWorks,
  requirement: "bubblewrap",
  cli: { args: ["--backend", "host", "--state-dir", stateDir] }
})
