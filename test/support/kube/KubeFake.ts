/**
 * A fake Kubernetes cluster with agent-sandbox installed, for tests: the API server fake
 * (FakeKubeApi.ts) on 127.0.0.1, the agent-sandbox controllers (FakeSandboxController.ts), and each
 * pod a local Docker container (PodRuntime.ts). `kubeconfig` is a file kubectl and
 * @kubernetes/client-node read as they would a real cluster's: HTTPS with a certificate of a CA
 * made for this fake (openssl), that CA in `certificate-authority-data`, and a bearer token.
 */
import { execFileSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { FakeKubeApi } from "./FakeKubeApi.js"
import { FakeSandboxController } from "./FakeSandboxController.js"
import { KubeFailure } from "./KubeStore.js"
import { dockerRuntime, type PodRuntime } from "./PodRuntime.js"
import { resourceOf } from "./SandboxCrds.js"

export interface KubeFake {
  readonly url: string
  readonly token: string
  readonly namespace: string
  /** A kubeconfig file for this cluster (current context: `fake`, namespace `namespace`). */
  readonly kubeconfig: string
  readonly api: FakeKubeApi
  readonly controller: FakeSandboxController
  /** Runs kubectl 1.32 against the cluster; resolves with its output and status. */
  readonly kubectl: (...args: Array<string>) => Promise<{ readonly stdout: string; readonly stderr: string; readonly code: number }>
  readonly close: () => Promise<void>
}

export interface KubeFakeOptions {
  readonly namespace?: string
  readonly runtime?: PodRuntime
  /** RuntimeClasses the cluster has (`gvisor`, `kata`); none by default. */
  readonly runtimeClasses?: ReadonlyArray<string>
}

/** A self-signed certificate for 127.0.0.1 (its own CA), made with openssl in `dir`. */
const certificate = (dir: string) => {
  const key = join(dir, "server.key")
  const cert = join(dir, "server.crt")
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
    "-subj", "/CN=kilntainers-kube-fake", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
    "-keyout", key, "-out", cert
  ], { stdio: "ignore" })
  return { cert: readFileSync(cert, "utf8"), key: readFileSync(key, "utf8") }
}

export const startKubeFake = async (options: KubeFakeOptions = {}): Promise<KubeFake> => {
  const id = randomBytes(4).toString("hex")
  const token = `kt-fake-${randomBytes(16).toString("hex")}`
  const namespace = options.namespace ?? `kt-${id}`
  const runtime = options.runtime ?? dockerRuntime(id)
  const dir = mkdtempSync(join(tmpdir(), "kt-kube-fake-"))
  const tls = certificate(dir)
  // The API routes execs to the controller's pods; the controller works on the API's store.
  const holder: { controller?: FakeSandboxController } = {}
  const api = new FakeKubeApi({
    tls,
    token,
    execTarget: (ns, pod) => {
      const handle = holder.controller!.podHandle(ns, pod)
      if (handle instanceof KubeFailure) return handle
      return { start: (argv, tty) => runtime.exec(handle, argv, tty) }
    }
  })
  const controller = new FakeSandboxController(api.store, runtime)
  holder.controller = controller
  await api.start()
  const namespaces = resourceOf("", "v1", "namespaces")!
  for (const name of new Set(["default", namespace])) api.store.create(namespaces, undefined, { metadata: { name } })
  const classes = resourceOf("node.k8s.io", "v1", "runtimeclasses")!
  for (const name of options.runtimeClasses ?? []) api.store.create(classes, undefined, { metadata: { name }, handler: name === "gvisor" ? "runsc" : name })
  const kubeconfig = join(dir, "config")
  writeFileSync(kubeconfig, [
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    "- name: fake",
    "  cluster:",
    `    server: ${api.url}`,
    `    certificate-authority-data: ${Buffer.from(tls.cert).toString("base64")}`,
    "users:",
    "- name: fake",
    "  user:",
    `    token: ${token}`,
    "contexts:",
    "- name: fake",
    "  context:",
    "    cluster: fake",
    "    user: fake",
    `    namespace: ${namespace}`,
    "current-context: fake",
    ""
  ].join("\n"), { mode: 0o600 })
  const { execFile } = await import("node:child_process")
  const kubectl = (...args: Array<string>) =>
    new Promise<{ stdout: string; stderr: string; code: number }>((resolve) => {
      execFile("kubectl", args, { env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", KUBECONFIG: kubeconfig, HOME: dir }, timeout: 60_000 }, (error, stdout, stderr) =>
        resolve({ stdout, stderr, code: error === null ? 0 : typeof error.code === "number" ? error.code : 1 }))
    })
  return {
    url: api.url,
    token,
    namespace,
    kubeconfig,
    api,
    controller,
    kubectl,
    close: async () => {
      await controller.close()
      await api.close()
      rmSync(dir, { recursive: true, force: true })
    }
  }
}
