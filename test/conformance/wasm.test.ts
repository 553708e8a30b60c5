import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as WasmBackend from "../../src/layers/backends/wasm/WasmBackend.js"
import { conformance } from "./Conformance.js"

const stateDir = mkdtempSync(join(tmpdir(), "kt-conformance-wasm-"))

conformance("toolset", {
  backend: () => WasmBackend.layer({ mode: "toolset", modulePath: undefined, maxMemoryMb: 256, timeoutMs: 0, stateDir }),
  settings: { stateDir },
  available: WasmBackend.findToolsetDir() !== undefined,
  requirement: "the WASI toolset (bash wasm/build.sh, output in wasm/build/)",
  fileModes: false
})
