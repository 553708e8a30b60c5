/** The flags every backend reads: where computers run, the transport, the tool description. */
import { defaultSettings } from "../../services/Settings.js"
import * as Flag from "../Flag.js"

const backends = ["auto", "host", "docker", "fly", "e2b", "modal", "kubernetes", "toolset", "go_busybox", "wasm"] as const
const logLevels = ["debug", "info", "warning", "error", "none"] as const

export const coreFlags = {
  backend: Flag.choice("backend", backends, {
    group: "core options",
    // process-mcp's PROCESS_MODE (host or docker) works too.
    alsoFrom: ["PROCESS_MODE"],
    default: "auto",
    shownDefault: "auto: docker if one answers, else host",
    help: "Where computers run"
  }),
  transport: Flag.choice("transport", ["stdio", "http"], {
    group: "core options",
    default: "stdio",
    help: "MCP transport; http serves Streamable HTTP at /mcp"
  }),
  timeout: Flag.integer("timeout", {
    group: "core options",
    default: defaultSettings.timeout,
    min: 1,
    unit: "seconds",
    help: "Default sandbox_exec timeout in seconds"
  }),
  outputLimit: Flag.integer("output-limit", {
    group: "core options",
    default: defaultSettings.outputLimit,
    min: 1,
    unit: "bytes",
    shownDefault: `${defaultSettings.outputLimit} = 2 MiB`,
    help: "Most bytes in one sandbox_exec result"
  }),
  shell: Flag.text("shell", {
    group: "core options",
    default: defaultSettings.shell,
    metavar: "PATH",
    help: "Shell that runs command strings"
  }),
  network: Flag.boolean("network", {
    group: "core options",
    negatable: true,
    shownDefault: "off",
    help: "Give computers network access"
  }),
  stateDir: Flag.optionalText("state-dir", {
    group: "core options",
    metavar: "DIR",
    // Docker keeps its warm pool records and the mounts it stages for the engine there.
    backends: ["host", "docker", "wasm", "toolset"],
    shownDefault: "$XDG_STATE_HOME/kilntainers",
    help: "Home of host/WASM computers and of Docker's staged mounts"
  }),
  logLevel: Flag.choice("log-level", logLevels, {
    group: "core options",
    default: "info",
    help: "Logging on stderr"
  }),
  toolInstructionOverride: Flag.optionalText("tool-instruction-override", {
    group: "tool description options",
    metavar: "TEXT",
    help: "Replace the entire sandbox_exec tool description"
  }),
  extendedToolInstruction: Flag.optionalText("extended-tool-instruction", {
    group: "tool description options",
    metavar: "TEXT",
    help: "Append to the sandbox_exec tool description"
  })
}

export const httpFlags = {
  host: Flag.text("host", {
    group: "http options",
    default: "127.0.0.1",
    metavar: "ADDRESS",
    transport: "http",
    help: "Address to bind"
  }),
  port: Flag.integer("port", {
    group: "http options",
    default: 8435,
    min: 0,
    max: 65535,
    transport: "http",
    help: "Port to listen on; 0 picks a free one"
  }),
  sessionTimeout: Flag.integer("session-timeout", {
    group: "http options",
    default: 300,
    min: 1,
    unit: "seconds",
    transport: "http",
    help: "Seconds before an idle session closes"
  }),
  authToken: Flag.secret("auth-token", {
    group: "http options",
    transport: "http",
    help: "Bearer token required on /mcp (prefer KILNTAINERS_AUTH_TOKEN)"
  }),
  allowUnauthenticatedHttp: Flag.boolean("allow-unauthenticated-http", {
    group: "http options",
    transport: "http",
    help: "Serve a non-loopback --host without a token (behind an auth proxy)"
  }),
  previewHost: Flag.text("preview-host", {
    group: "http options",
    default: "127.0.0.1",
    metavar: "ADDRESS",
    more: true,
    help: "Address of the preview URL listener (computer_expose)"
  }),
  previewPort: Flag.optionalInteger("preview-port", {
    group: "http options",
    min: 0,
    max: 65535,
    more: true,
    help: "Serve preview URLs on this port (own origin, not /mcp's; 0: a free one); stdio too"
  }),
  maxSessions: Flag.integer("max-sessions", {
    group: "http options",
    default: 100,
    min: 1,
    transport: "http",
    more: true,
    help: "Most concurrent MCP sessions"
  }),
  authPrincipal: Flag.pairs("auth-principal", {
    group: "http options",
    metavar: "NAME=VARIABLE",
    transport: "http",
    more: true,
    help: "A client with a token of its own, read from the server's environment VARIABLE; sessions and " +
      "request memory are capped per principal; repeatable"
  }),
  maxSessionsPerPrincipal: Flag.optionalInteger("max-sessions-per-principal", {
    group: "http options",
    min: 1,
    transport: "http",
    more: true,
    shownDefault: "--max-sessions with one principal, half of it with several",
    help: "Most concurrent MCP sessions of one principal"
  }),
  maxBodyMemory: Flag.integer("max-body-memory", {
    group: "http options",
    default: 256,
    // One message of the largest size, 32 MiB, at three bytes of memory per byte while it is parsed.
    min: 96,
    unit: "MiB",
    transport: "http",
    more: true,
    help: "MiB of memory request bodies may take at once while read and parsed (3 per body byte), all " +
      "clients together; more is refused (503, Retry-After)"
  }),
  maxBodyMemoryPerPrincipal: Flag.optionalInteger("max-body-memory-per-principal", {
    group: "http options",
    min: 96,
    unit: "MiB",
    transport: "http",
    more: true,
    shownDefault: "--max-body-memory with one principal, half of it with several",
    help: "MiB of memory one principal's request bodies may take at once"
  })
}
