/** The flags of the hosted backends: Fly Machines, E2B and Modal. */
import { defaultSettings } from "../../services/Settings.js"
import * as Flag from "../Flag.js"

const url = { test: /^https?:\/\/[^\s/]+/, says: "must be an http:// or https:// URL" }

const fly = defaultSettings.fly
const e2b = defaultSettings.e2b
const modal = defaultSettings.modal

export const flyFlags = {
  flyApp: Flag.optionalText("fly-app", {
    group: "fly backend options",
    metavar: "APP",
    alsoFrom: ["FLY_APP_NAME"],
    backends: ["fly"],
    shownDefault: "$FLY_APP_NAME",
    help: "Fly app of the computers' Machines"
  }),
  flyToken: Flag.secret("fly-token", {
    group: "fly backend options",
    alsoFrom: ["FLY_API_TOKEN", "FLY_TOKEN"],
    backends: ["fly"],
    shownDefault: "$FLY_API_TOKEN or $FLY_TOKEN",
    help: "Fly API token"
  }),
  flyImage: Flag.text("fly-image", { group: "fly backend options", default: fly.image, backends: ["fly"], help: "Machine image" }),
  flyRegion: Flag.optionalText("fly-region", {
    group: "fly backend options",
    metavar: "REGION",
    alsoFrom: ["FLY_REGION"],
    backends: ["fly"],
    shownDefault: "$FLY_REGION or Fly's placement",
    help: "Region of new Machines"
  }),
  flyCpuKind: Flag.choice("fly-cpu-kind", ["shared", "performance"], {
    group: "fly backend options",
    default: fly.cpuKind,
    backends: ["fly"],
    help: "Machine CPU kind"
  }),
  flyCpus: Flag.integer("fly-cpus", { group: "fly backend options", default: fly.cpus, min: 1, backends: ["fly"], help: "vCPUs per Machine" }),
  flyMemory: Flag.integer("fly-memory", {
    group: "fly backend options",
    default: fly.memoryMb,
    min: 256,
    unit: "MB",
    metavar: "MB",
    backends: ["fly"],
    help: "Memory per Machine in MB (a multiple of 256)"
  }),
  flyRateLimit: Flag.positiveNumber("fly-rate-limit", {
    group: "fly backend options",
    default: fly.rateLimit.perSecond,
    backends: ["fly"],
    more: true,
    help: "API requests per second per action and machine kilntainers allows itself (Fly documents 1)"
  }),
  flyRateBurst: Flag.integer("fly-rate-burst", {
    group: "fly backend options",
    default: fly.rateLimit.burst,
    min: 1,
    backends: ["fly"],
    more: true,
    help: "Burst of those requests (Fly documents 3)"
  }),
  flyRootfsSize: Flag.optionalInteger("fly-rootfs-size", {
    group: "fly backend options",
    min: 1,
    unit: "GB",
    metavar: "GB",
    backends: ["fly"],
    help: "Root filesystem size in GB"
  }),
  flyPreviewPort: Flag.commaList("fly-preview-port", {
    group: "fly backend options",
    more: true,
    metavar: "PORT",
    backends: ["fly"],
    each: (item) => (/^[1-9][0-9]{0,4}$/.test(item) && Number(item) <= 65535 ? undefined : `'${item}' is not a port from 1 to 65535`),
    help: "Ports new machines serve through Fly's proxy (computer_expose)"
  }),
  flyCli: Flag.optionalText("fly-cli", {
    group: "fly backend options",
    metavar: "PATH",
    backends: ["fly"],
    more: true,
    help: "Ignored: kilntainers calls the Machines API without flyctl"
  }),
  flyApiUrl: Flag.optionalText("fly-api-url", {
    group: "fly backend options",
    metavar: "URL",
    pattern: url,
    backends: ["fly"],
    more: true,
    shownDefault: fly.apiUrl,
    help: "Machines API URL"
  })
}

export const e2bFlags = {
  e2bApiKey: Flag.secret("e2b-api-key", {
    group: "e2b backend options",
    alsoFrom: ["E2B_API_KEY"],
    backends: ["e2b"],
    shownDefault: "$E2B_API_KEY",
    help: "E2B API key"
  }),
  e2bTemplate: Flag.text("e2b-template", {
    group: "e2b backend options",
    default: e2b.template,
    metavar: "NAME",
    backends: ["e2b"],
    help: "Sandbox template name or id"
  }),
  e2bSandboxTimeout: Flag.integer("e2b-sandbox-timeout", {
    group: "e2b backend options",
    default: e2b.sandboxTimeoutSec,
    min: 1,
    unit: "seconds",
    backends: ["e2b"],
    help: "Sandbox lifetime, renewed while in use"
  }),
  e2bMaxRuntime: Flag.integer("e2b-max-runtime", {
    group: "e2b backend options",
    default: e2b.maxRuntimeSec,
    min: 60,
    unit: "seconds",
    backends: ["e2b"],
    help: "Your plan's longest sandbox run (Base 3600, Pro 86400)"
  }),
  e2bMetadata: Flag.pairs("e2b-metadata", {
    group: "e2b backend options",
    backends: ["e2b"],
    help: "Metadata of new sandboxes, repeatable"
  }),
  e2bEnv: Flag.pairs("e2b-env", {
    group: "e2b backend options",
    backends: ["e2b"],
    help: "Environment of new sandboxes, repeatable"
  }),
  e2bApiUrl: Flag.optionalText("e2b-api-url", {
    group: "e2b backend options",
    metavar: "URL",
    pattern: url,
    backends: ["e2b"],
    more: true,
    help: "Control-plane API URL (the SDK's apiUrl)"
  }),
  e2bSandboxUrl: Flag.optionalText("e2b-sandbox-url", {
    group: "e2b backend options",
    metavar: "URL",
    pattern: url,
    backends: ["e2b"],
    more: true,
    help: "Sandbox (envd) URL (the SDK's sandboxUrl)"
  }),
  e2bDomain: Flag.optionalText("e2b-domain", {
    group: "e2b backend options",
    metavar: "DOMAIN",
    backends: ["e2b"],
    more: true,
    help: "E2B domain"
  }),
  e2bHome: Flag.optionalText("e2b-home", {
    group: "e2b backend options",
    metavar: "DIR",
    backends: ["e2b"],
    more: true,
    shownDefault: "/home/user",
    help: "Home directory in the template"
  })
}

export const modalFlags = {
  modalTokenId: Flag.secret("modal-token-id", {
    group: "modal backend options",
    alsoFrom: ["MODAL_TOKEN_ID"],
    backends: ["modal"],
    shownDefault: "$MODAL_TOKEN_ID",
    help: "Modal token id"
  }),
  modalTokenSecret: Flag.secret("modal-token-secret", {
    group: "modal backend options",
    alsoFrom: ["MODAL_TOKEN_SECRET"],
    backends: ["modal"],
    shownDefault: "$MODAL_TOKEN_SECRET",
    help: "Modal token secret"
  }),
  modalAppName: Flag.text("modal-app-name", {
    group: "modal backend options",
    default: modal.appName,
    metavar: "NAME",
    backends: ["modal"],
    help: "Modal app of the sandboxes"
  }),
  modalImage: Flag.text("modal-image", {
    group: "modal backend options",
    default: modal.image,
    backends: ["modal"],
    help: "Registry image of new sandboxes"
  }),
  modalCpu: Flag.positiveNumber("modal-cpu", {
    group: "modal backend options",
    default: modal.cpu,
    backends: ["modal"],
    help: "CPU cores, fractional"
  }),
  modalPreviewPort: Flag.commaList("modal-preview-port", {
    group: "modal backend options",
    more: true,
    metavar: "PORT",
    backends: ["modal"],
    each: (item) => (/^[1-9][0-9]{0,4}$/.test(item) && Number(item) <= 65535 ? undefined : `'${item}' is not a port from 1 to 65535`),
    help: "Ports new sandboxes serve through Modal tunnels (computer_expose)"
  }),
  modalMemory: Flag.integer("modal-memory", {
    group: "modal backend options",
    default: modal.memoryMb,
    min: 1,
    unit: "MiB",
    metavar: "MIB",
    backends: ["modal"],
    help: "Memory in MiB"
  }),
  gpu: Flag.optionalText("gpu", {
    group: "modal backend options",
    metavar: "GPU",
    backends: ["modal"],
    help: "GPU type, e.g. T4, A10G or A100-80GB:2"
  }),
  region: Flag.optionalText("region", {
    group: "modal backend options",
    metavar: "REGION",
    backends: ["modal"],
    help: "Region, e.g. us-east"
  }),
  sandboxTimeout: Flag.integer("sandbox-timeout", {
    group: "modal backend options",
    default: modal.sandboxTimeoutSec,
    min: 1,
    max: 86_400,
    unit: "seconds",
    backends: ["modal"],
    help: "Sandbox lifetime in seconds"
  })
}
