/** The flags of the WebAssembly backends: your WASI module (wasm) and the toolset. */
import { defaultSettings } from "../../services/Settings.js"
import * as Flag from "../Flag.js"

export const wasmFlags = {
  wasmPath: Flag.optionalText("wasm-path", {
    group: "wasm backend options",
    metavar: "FILE",
    backends: ["wasm"],
    help: "The WASI module every process runs (required for --backend wasm)"
  }),
  wasmMaxMemory: Flag.integer("wasm-max-memory", {
    group: "wasm backend options",
    default: defaultSettings.wasmMaxMemoryMb,
    min: 1,
    unit: "MiB",
    metavar: "MIB",
    backends: ["wasm", "toolset"],
    help: "Memory cap per module in MiB"
  }),
  wasmMaxDisk: Flag.text("wasm-max-disk", {
    group: "wasm backend options",
    default: "256m",
    metavar: "SIZE",
    backends: ["wasm", "toolset"],
    help: "Filesystem size per computer (a file costs 1 KiB more)"
  }),
  wasmTimeoutMs: Flag.integer("wasm-timeout-ms", {
    group: "wasm backend options",
    default: defaultSettings.wasmTimeoutMs,
    min: 0,
    metavar: "MS",
    backends: ["wasm", "toolset"],
    shownDefault: "0, none",
    help: "Wall clock per process in ms"
  }),
  wasmFuel: Flag.optionalInteger("wasm-fuel", {
    group: "wasm backend options",
    min: 1,
    backends: ["wasm", "toolset"],
    more: true,
    help: "Refused: Node cannot meter WebAssembly; use --wasm-timeout-ms"
  })
}
