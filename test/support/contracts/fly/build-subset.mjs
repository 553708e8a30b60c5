// Writes machines-openapi.json: the part of Fly's Machines OpenAPI document that kilntainers uses
// (paths under /apps/{app_name}/machines, and every schema they reach), transcribed from the
// source named in "x-kilntainers-source". Descriptions and examples are left out; every
// validating keyword (type, properties, items, additionalProperties, enum, required, allOf,
// $ref) is kept as published. Run: node test/support/contracts/fly/build-subset.mjs
import { writeFileSync } from "node:fs"
const s = (type, extra = {}) => ({ type, ...extra })
const str = s("string"), int = s("integer"), bool = s("boolean"), num = s("number")
const arr = (items) => ({ type: "array", items })
const ref = (name) => ({ $ref: `#/components/schemas/${name}` })
const obj = (properties, extra = {}) => ({ type: "object", properties, ...extra })
const map = (values) => ({ type: "object", additionalProperties: values })
const enumOf = (...values) => ({ type: "string", enum: values })
const wrapped = (name) => ({ type: "object", allOf: [ref(name)] })
const SIGNALS7 = ["SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGTERM"]

const schemas = {
  CheckStatus: obj({ name: str, output: str, status: str, updated_at: str }),
  CreateMachineRequest: obj({
    config: wrapped("fly.MachineConfig"), lease_ttl: int, min_secrets_version: int, name: str, region: str,
    skip_launch: bool, skip_secrets: bool, skip_service_registration: bool
  }),
  ErrorResponse: obj({ details: s("object"), error: str, status: ref("main.statusCode") }),
  ImageRef: obj({ digest: str, labels: map(str), registry: str, repository: str, tag: str }),
  Machine: obj({
    checks: arr(ref("CheckStatus")), config: ref("fly.MachineConfig"), cordoned: bool, created_at: str,
    events: arr(ref("MachineEvent")), host_status: enumOf("ok", "unknown", "unreachable"), id: str,
    image_ref: ref("ImageRef"), incomplete_config: ref("fly.MachineConfig"), instance_id: str,
    lease: ref("StrippedLease"), name: str, nonce: str, private_ip: str, region: str, state: str, updated_at: str
  }),
  MachineEvent: obj({ id: str, request: s("object"), source: str, status: str, timestamp: int, type: str }),
  MachineExecRequest: obj({ cmd: str, command: arr(str), container: str, stdin: str, timeout: int }),
  SignalRequest: obj({
    signal: enumOf("SIGABRT", "SIGALRM", "SIGFPE", "SIGHUP", "SIGILL", "SIGINT", "SIGKILL", "SIGPIPE", "SIGQUIT", "SIGSEGV", "SIGTERM", "SIGTRAP", "SIGUSR1", "SIGUSR2")
  }),
  StopRequest: obj({ signal: enumOf(...SIGNALS7), timeout: str }),
  StrippedLease: obj({ description: str, expires_at: int, owner: str }),
  WaitMachineResponse: obj({ event_id: str, ok: bool, state: str, version: str }),
  "fly.ContainerConfig": obj({
    cmd: arr(str), depends_on: arr(ref("fly.ContainerDependency")), entrypoint: arr(str), env: map(str),
    env_from: arr(ref("fly.EnvFrom")), exec: arr(str), files: arr(ref("fly.File")),
    healthchecks: arr(ref("fly.ContainerHealthcheck")), image: str, name: str, restart: wrapped("fly.MachineRestart"),
    secrets: arr(ref("fly.MachineSecret")), stop: wrapped("fly.StopConfig"), user: str
  }),
  "fly.ContainerDependency": obj({ condition: wrapped("fly.ContainerDependencyCondition"), name: str }),
  "fly.ContainerDependencyCondition": enumOf("exited_successfully", "healthy", "started"),
  "fly.ContainerHealthcheck": obj({
    exec: ref("fly.ExecHealthcheck"), failure_threshold: int, grace_period: int, http: ref("fly.HTTPHealthcheck"), interval: int,
    kind: wrapped("fly.ContainerHealthcheckKind"), name: str, success_threshold: int, tcp: ref("fly.TCPHealthcheck"), timeout: int,
    unhealthy: wrapped("fly.UnhealthyPolicy")
  }),
  "fly.ContainerHealthcheckKind": enumOf("readiness", "liveness"),
  "fly.ContainerHealthcheckScheme": enumOf("http", "https"),
  "fly.DNSConfig": obj({
    dns_forward_rules: arr(ref("fly.dnsForwardRule")), hostname: str, hostname_fqdn: str, nameservers: arr(str),
    options: arr(ref("fly.dnsOption")), searches: arr(str), skip_registration: bool
  }),
  "fly.EnvFrom": obj({ env_var: str, field_ref: enumOf("id", "version", "app_name", "private_ip", "region", "image") }),
  "fly.ExecHealthcheck": obj({ command: arr(str) }),
  "fly.File": obj({ guest_path: str, image_config: str, mode: int, raw_value: str, secret_name: str }),
  "fly.HTTPHealthcheck": obj({
    headers: arr(ref("fly.MachineHTTPHeader")), method: str, path: str, port: int, scheme: wrapped("fly.ContainerHealthcheckScheme"),
    tls_server_name: str, tls_skip_verify: bool
  }),
  "fly.HTTPOptions": obj({
    compress: bool, h2_backend: bool, headers_read_timeout: int, idle_timeout: int, replay_cache: arr(ref("fly.ReplayCache")),
    response: ref("fly.HTTPResponseOptions")
  }),
  "fly.HTTPResponseOptions": obj({ headers: map(s("object")), pristine: bool }),
  "fly.MachineCacheDrive": obj({ size_mb: int }),
  "fly.MachineCheck": obj({
    grace_period: str, headers: arr(ref("fly.MachineHTTPHeader")), interval: str, kind: enumOf("informational", "readiness"),
    method: str, path: str, port: int, protocol: str, timeout: str, tls_server_name: str, tls_skip_verify: bool, type: str
  }),
  "fly.MachineConfig": obj({
    auto_destroy: bool, cache_drive: ref("fly.MachineCacheDrive"), checks: map(ref("fly.MachineCheck")),
    containers: arr(ref("fly.ContainerConfig")), disable_machine_autostart: bool, dns: ref("fly.DNSConfig"), env: map(str),
    files: arr(ref("fly.File")), guest: ref("fly.MachineGuest"), image: str, init: ref("fly.MachineInit"), metadata: map(str),
    metrics: ref("fly.MachineMetrics"), mounts: arr(ref("fly.MachineMount")), processes: arr(ref("fly.MachineProcess")),
    restart: ref("fly.MachineRestart"), rootfs: ref("fly.MachineRootfs"), schedule: str, services: arr(ref("fly.MachineService")),
    size: str, spot: ref("fly.MachineSpot"), standbys: arr(str), statics: arr(ref("fly.Static")), stop_config: ref("fly.StopConfig")
  }),
  "fly.MachineGuest": obj({
    cpu_kind: str, cpus: int, gpu_kind: str, gpus: int, host_dedication_id: str, kernel_args: arr(str), max_memory_mb: int,
    memory_mb: int, persist_rootfs: enumOf("never", "always", "restart")
  }),
  "fly.MachineHTTPHeader": obj({ name: str, values: arr(str) }),
  "fly.MachineInit": obj({ cmd: arr(str), entrypoint: arr(str), exec: arr(str), kernel_args: arr(str), swap_size_mb: int, tty: bool }),
  "fly.MachineMetrics": obj({ https: bool, path: str, port: int }),
  "fly.MachineMount": obj({
    add_size_gb: int, encrypted: bool, extend_threshold_percent: int, name: str, path: str, size_gb: int, size_gb_limit: int, volume: str
  }),
  "fly.MachinePort": obj({
    end_port: int, force_https: bool, handlers: arr(str), http_options: ref("fly.HTTPOptions"), port: int,
    proxy_proto_options: ref("fly.ProxyProtoOptions"), start_port: int, tls_options: ref("fly.TLSOptions")
  }),
  "fly.MachineProcess": obj({
    cmd: arr(str), entrypoint: arr(str), env: map(str), env_from: arr(ref("fly.EnvFrom")), exec: arr(str), ignore_app_secrets: bool,
    secrets: arr(ref("fly.MachineSecret")), user: str
  }),
  "fly.MachineRestart": obj({ gpu_bid_price: num, max_retries: int, policy: enumOf("no", "always", "on-failure", "spot-price") }),
  "fly.MachineRootfs": obj({ persist: enumOf("never", "always", "restart"), size_gb: int }),
  "fly.MachineSecret": obj({ env_var: str, name: str }),
  "fly.MachineService": obj({
    autostart: bool, autostop: enumOf("off", "stop", "suspend"), checks: arr(ref("fly.MachineServiceCheck")),
    concurrency: ref("fly.MachineServiceConcurrency"), force_instance_description: str, force_instance_key: str, internal_port: int,
    min_machines_running: int, ports: arr(ref("fly.MachinePort")), protocol: str
  }),
  "fly.MachineServiceCheck": obj({
    grace_period: str, headers: arr(ref("fly.MachineHTTPHeader")), interval: str, method: str, path: str, port: int, protocol: str,
    timeout: str, tls_server_name: str, tls_skip_verify: bool, type: str
  }),
  "fly.MachineServiceConcurrency": obj({ hard_limit: int, soft_limit: int, type: str }),
  "fly.MachineSpot": obj({ max_price_fraction: num }),
  "fly.ProxyProtoOptions": obj({ version: str }),
  "fly.ReplayCache": obj({ allow_bypass: bool, name: str, path_prefix: str, ttl_seconds: int, type: enumOf("cookie", "header") }),
  "fly.Static": obj({ guest_path: str, index_document: str, tigris_bucket: str, url_prefix: str }, { required: ["guest_path", "url_prefix"] }),
  "fly.StopConfig": obj({ signal: enumOf(...SIGNALS7), timeout: str }),
  "fly.TCPHealthcheck": obj({ port: int }),
  "fly.TLSOptions": obj({ alpn: arr(str), default_self_signed: bool, versions: arr(str) }),
  "fly.UnhealthyPolicy": enumOf("stop"),
  "fly.dnsForwardRule": obj({ addr: str, basename: str }),
  "fly.dnsOption": obj({ name: str, value: str }),
  "flydv1.ExecResponse": obj({ exit_code: int, exit_signal: int, stderr: str, stdout: str }),
  "main.statusCode": enumOf("unknown", "insufficient_capacity"),
  upsertMetadataKeyRequest: obj({ updated_at: str, value: str })
}

const path = (name, where = "path") => ({ name, in: where, required: where === "path", schema: str })
const query = (name, schema) => ({ name, in: "query", schema })
const app = path("app_name"), machine = path("machine_id")
const json = (schema) => ({ content: { "application/json": { schema } } })
const empty = { content: {} }
const error = json(ref("ErrorResponse"))
const body = (name, required = true) => ({ required, ...json(ref(name)) })

const paths = {
  "/apps/{app_name}/machines": {
    get: {
      operationId: "Machines_list",
      parameters: [app, query("include_deleted", bool), query("include_leases", bool), query("region", str), query("state", str), query("summary", bool)],
      responses: { 200: json(arr(ref("Machine"))) }
    },
    post: { operationId: "Machines_create", parameters: [app], requestBody: body("CreateMachineRequest"), responses: { 200: json(ref("Machine")) } }
  },
  "/apps/{app_name}/machines/{machine_id}": {
    get: { operationId: "Machines_show", parameters: [app, machine, query("include_leases", bool)], responses: { 200: json(ref("Machine")) } },
    delete: { operationId: "Machines_delete", parameters: [app, machine, query("force", bool)], responses: { 200: empty } }
  },
  "/apps/{app_name}/machines/{machine_id}/exec": {
    post: {
      operationId: "Machines_exec",
      parameters: [app, machine],
      requestBody: body("MachineExecRequest"),
      responses: { 200: json(ref("flydv1.ExecResponse")), 400: error }
    }
  },
  "/apps/{app_name}/machines/{machine_id}/metadata": {
    get: { operationId: "Machines_show_metadata", parameters: [app, machine], responses: { 200: json(map(str)) } }
  },
  "/apps/{app_name}/machines/{machine_id}/metadata/{key}": {
    post: {
      operationId: "Machines_upsert_metadata",
      parameters: [app, machine, path("key")],
      requestBody: body("upsertMetadataKeyRequest"),
      responses: { 204: empty, 400: error }
    },
    delete: { operationId: "Machines_delete_metadata", parameters: [app, machine, path("key")], responses: { 204: empty } }
  },
  "/apps/{app_name}/machines/{machine_id}/restart": {
    post: {
      operationId: "Machines_restart",
      parameters: [app, machine, query("timeout", str), query("signal", enumOf("SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGTERM"))],
      responses: { 200: empty, 400: error }
    }
  },
  "/apps/{app_name}/machines/{machine_id}/signal": {
    post: { operationId: "Machines_signal", parameters: [app, machine], requestBody: body("SignalRequest"), responses: { 200: empty, 400: error } }
  },
  "/apps/{app_name}/machines/{machine_id}/start": {
    post: { operationId: "Machines_start", parameters: [app, machine], responses: { 200: empty } }
  },
  "/apps/{app_name}/machines/{machine_id}/stop": {
    post: { operationId: "Machines_stop", parameters: [app, machine], requestBody: body("StopRequest", false), responses: { 200: empty, 400: error } }
  },
  "/apps/{app_name}/machines/{machine_id}/suspend": {
    post: { operationId: "Machines_suspend", parameters: [app, machine], responses: { 200: empty } }
  },
  "/apps/{app_name}/machines/{machine_id}/wait": {
    get: {
      operationId: "Machines_wait",
      parameters: [
        app, machine, query("version", str), query("instance_id", str), query("from_event_id", str), query("timeout", int),
        query("state", enumOf("started", "stopped", "suspended", "destroyed", "failed", "settled"))
      ],
      responses: { 200: json(ref("WaitMachineResponse")), 400: error }
    }
  }
}

const document = {
  "x-kilntainers-source": {
    document: "Fly.io Machines API OpenAPI specification (openapi 3.0.1, \"Machines API\" 1.0, x-original-swagger-version 2.0), as published at https://docs.machines.dev/spec/openapi3.json",
    copy: "https://github.com/cloudy-sky-software/pulumi-fly-machines/blob/036c8be18ae3f562b397685f247cb3b96884116d/provider/cmd/pulumi-gen-fly-machines/openapi.yml (a YAML rendering of that document, vendored by a generator)",
    retrieved: "2026-11-30",
    license: "Apache-2.0 (the document's info.license)",
    subset: "the paths under /apps/{app_name}/machines that kilntainers or its fake use, and every schema they reach; descriptions and examples left out"
  },
  "x-kilntainers-documented": {
    "generic-responses": {
      source: "https://fly.io/docs/machines/api/working-with-machines-api/ (superfly/docs machines/api/working-with-machines-api.mdx @dc34b02), section Response Codes",
      statuses: [200, 201, 202, 204, 400, 401, 404, 408, 422, "5xx"],
      body: "ErrorResponse"
    },
    "rate-limit": {
      source: "same page, section Rate Limits: 1 request/s per action and machine (or app), burst 3; Get Machine 5/s, burst 10",
      statuses: [429],
      body: "ErrorResponse"
    },
    "conflicts": {
      source: "superfly/fly-go flaps/flaps_error.go (409: a lease held by another, flyd's 'insufficient CPUs/memory available' on a host, 'no capacity'); Fly's answers seen by clients (412: 'insufficient resources to create new machine with existing volume', min_secrets_version / machine_version preconditions; Kilo-Org/cloud #388, #3212)",
      statuses: [409, 412],
      body: "ErrorResponse"
    },
    "description-rules": {
      source: "https://fly.io/docs/machines/api/machines-resource/ (superfly/docs machines/api/machines-resource.mdx @1e41182), Wait: instance_id is 'Required when waiting for Machine to be in stopped state'",
      rules: [{ operation: "Machines_wait", when: { query: "state", equals: "stopped" }, requires: { query: "instance_id" } }]
    },
    "guest-sizing": {
      source: "https://fly.io/docs/machines/guides-examples/machine-sizing/ (General Rules): memory from 256 MB x shared CPUs to 2 GB x shared CPUs, from 2048 MB x performance CPUs to 8 GB x performance CPUs; memory_mb a multiple of 256 (machines-resource guest)",
      operations: ["Machines_create"],
      multipleOfMb: 256,
      perCpuMb: { shared: { min: 256, max: 2048 }, performance: { min: 2048, max: 8192 } }
    },
    "list-metadata-filter": {
      source: "https://fly.io/docs/machines/api/machines-resource/#list-machines (superfly/docs machines/api/machines-resource.mdx @1e41182): query metadata.{key}=value",
      operation: "Machines_list",
      queryPrefix: "metadata."
    }
  },
  openapi: "3.0.1",
  info: { title: "Machines API", version: "1.0", license: { name: "Apache 2.0", url: "http://www.apache.org/licenses/LICENSE-2.0.html" } },
  servers: [{ url: "https://api.machines.dev/v1" }],
  paths,
  components: { schemas }
}
writeFileSync(new URL("./machines-openapi.json", import.meta.url), `${JSON.stringify(document, null, 1)}\n`)
