/**
 * kilntainers as a library: compose a backend with the runtime and drive processes without MCP,
 * or serve MCP from your own program.
 */

/** @category errors */
export * from "./domain/Errors.js"
/** @category models */
export * from "./domain/Process.js"
/** @category services */
export * from "./services/Backend.js"
/** @category services */
export * from "./services/Computers.js"
/** @category services */
export * from "./services/Processes.js"
/** @category services */
export * from "./services/ProcessInputs.js"
/** @category services */
export * from "./services/Settings.js"
/** @category actors */
export { OutputLog } from "./actors/OutputLog.js"
/** @category actors */
export { truncateMiddle } from "./actors/OutputSlice.js"
/** @category actors */
export { TerminalScreen } from "./actors/TerminalScreen.js"
/** @category domain */
export { parseStdinEscapes } from "./domain/StdinEscapes.js"
/** @category layers */
export * as HostBackend from "./layers/backends/host/HostBackend.js"
/** @category layers */
export * as Runtime from "./layers/Runtime.js"
/** @category layers */
export * as Kilntainers from "./layers/Main.js"
/** @category layers */
export * as McpServer from "./layers/mcp/McpServer.js"
/** @category layers */
export * as Tracing from "./layers/tracing/Tracing.js"
/** @category services */
export * as Spans from "./services/Spans.js"
/** @category layers */
export * as HttpServer from "./layers/mcp/HttpServer.js"
/** @category layers */
export * as DockerBackend from "./layers/backends/docker/DockerBackend.js"
/** @category services */
export * from "./services/Files.js"
/** @category layers */
export * as FlyBackend from "./layers/backends/fly/FlyBackend.js"
/** @category layers */
export * as E2BBackend from "./layers/backends/e2b/E2BBackend.js"
/** @category layers */
export * as ModalBackend from "./layers/backends/modal/ModalBackend.js"
/** @category layers */
export * as WasmBackend from "./layers/backends/wasm/WasmBackend.js"
