/** The flags of the backends on this machine: Docker/Podman and the host sandbox. */
import { defaultSettings } from "../../services/Settings.js"
import * as Flag from "../Flag.js"

export const dockerFlags = {
  engine: Flag.choice("engine", ["docker", "podman"], {
    group: "docker backend options",
    default: defaultSettings.engine,
    backends: ["docker"],
    help: "Container engine"
  }),
  dockerHost: Flag.optionalText("docker-host", {
    group: "docker backend options",
    metavar: "URL",
    backends: ["docker"],
    shownDefault: "the local socket",
    help: "Engine address, unix://, tcp:// or ssh://"
  }),
  image: Flag.text("image", {
    group: "docker backend options",
    // process-mcp's DOCKER_IMAGE works too.
    alsoFrom: ["DOCKER_IMAGE"],
    default: defaultSettings.image,
    backends: ["docker"],
    help: "Image of new computers; the default is built once from debian:bookworm-slim"
  }),
  warmPool: Flag.integer("warm-pool", {
    group: "docker backend options",
    default: defaultSettings.warmPool,
    min: 0,
    max: 100,
    backends: ["docker", "host"],
    help: "Computers kept ready for new ones (docker, host)"
  }),
  maxCheckpoints: Flag.integer("max-checkpoints", {
    group: "docker backend options",
    default: defaultSettings.maxCheckpoints,
    min: 0,
    max: 1000,
    more: true,
    help: "Checkpoints one session may hold at once (docker, host; 0: off)"
  }),
  cpu: Flag.optionalPositiveNumber("cpu", {
    group: "docker backend options",
    backends: ["docker", "host"],
    shownDefault: "1",
    help: "CPUs per computer (docker, host), e.g. 1.5"
  }),
  memory: Flag.optionalText("memory", {
    group: "docker backend options",
    metavar: "SIZE",
    backends: ["docker", "host"],
    shownDefault: "1g",
    pattern: { test: /^\d+(\.\d+)?[bkmg]?$/i, says: "must be a size such as 512m or 2g" },
    help: "Memory per computer (docker and host)"
  }),
  pidsLimit: Flag.integer("pids-limit", {
    group: "docker backend options",
    default: defaultSettings.pidsLimit,
    min: 16,
    backends: ["docker", "host"],
    help: "Most processes per computer (docker and host)"
  }),
  dockerRunFlag: Flag.list("docker-run-flag", {
    group: "docker backend options",
    metavar: "FLAG",
    backends: ["docker"],
    help: "Extra docker run option from a documented subset, repeatable"
  })
}

export const hostFlags = {
  unsafeNoSandbox: Flag.boolean("unsafe-no-sandbox", {
    group: "host backend options",
    backends: ["host"],
    help: "DANGEROUS: no bubblewrap; processes can read and change your files"
  }),
  bwrapPath: Flag.optionalText("bwrap-path", {
    group: "host backend options",
    metavar: "PATH",
    backends: ["host"],
    shownDefault: "found in /usr/bin, /usr/local/bin, /bin",
    more: true,
    help: "bubblewrap executable"
  })
}
