/**
 * Where the Kubernetes fake's pods really run: each pod a local Docker container (the brief's
 * image, `kilntainers-test:bookworm`, or whatever the pod spec names), so that a client's
 * `pods/exec` reaches a real shell and a real kt-agent. One runtime per fake; containers carry the
 * fake's label so that a crashed test's are found and removed.
 *
 * An exec is a Docker exec of the pod's first container: its streams as they come (stdout and
 * stderr split from Docker's multiplexed stream, or one terminal stream), stdin written and
 * half-closed, a terminal resized, and its exit code once it ends.
 */
import Docker from "dockerode"
import type { Duplex } from "node:stream"
import { Demuxer } from "../../../src/layers/backends/docker/Demuxer.js"
import type { KubeObject } from "./KubeStore.js"

export interface PodExec {
  readonly onStdout: (listener: (data: Buffer) => void) => void
  readonly onStderr: (listener: (data: Buffer) => void) => void
  readonly write: (data: Buffer) => void
  readonly closeStdin: () => void
  readonly resize: (cols: number, rows: number) => void
  /** Stops delivering output until `resume` (the client is behind). */
  readonly pause: () => void
  readonly resume: () => void
  /** The exit code once the command and its output have ended; undefined when the pod went away. */
  readonly exited: Promise<number | undefined>
  readonly kill: () => void
}

export interface PodHandle {
  readonly containerId: string
  readonly ip: string
}

export interface PodRuntime {
  /** Starts the pod; resolves once its container runs. */
  readonly start: (namespace: string, pod: KubeObject) => Promise<PodHandle>
  readonly stop: (handle: PodHandle) => Promise<void>
  /** Whether the pod's main process still runs. */
  readonly running: (handle: PodHandle) => Promise<boolean>
  readonly exec: (handle: PodHandle, argv: ReadonlyArray<string>, tty: boolean) => Promise<PodExec>
  /** Removes every container this runtime made (the end of a test). */
  readonly close: () => Promise<void>
}

export const FAKE_LABEL = "kilntainers-test-kube-fake"

/** Pods as Docker containers of the engine at /var/run/docker.sock. */
export const dockerRuntime = (fakeId: string, options: { readonly network?: "none" | "bridge" } = {}): PodRuntime => {
  const docker = new Docker()
  const made = new Set<string>()
  return {
    start: async (namespace, pod) => {
      const spec = pod["spec"] ?? {}
      const main = (spec["containers"] ?? [])[0] ?? {}
      const command: Array<string> = [...(main["command"] ?? []), ...(main["args"] ?? [])]
      const env = (main["env"] ?? []).filter((e: KubeObject) => typeof e["value"] === "string").map((e: KubeObject) => `${e["name"]}=${e["value"]}`)
      const container = await docker.createContainer({
        Image: String(main["image"] ?? "kilntainers-test:bookworm"),
        ...(command.length > 0 ? { Cmd: command } : {}),
        Env: env,
        Hostname: String(pod["metadata"]["name"]).slice(0, 63),
        WorkingDir: main["workingDir"] ?? "",
        Labels: { [FAKE_LABEL]: fakeId, "kilntainers-test-kube-pod": `${namespace}/${pod["metadata"]["name"]}` },
        HostConfig: { NetworkMode: options.network ?? "none", AutoRemove: false }
      })
      made.add(container.id)
      await container.start()
      const info = await container.inspect()
      const ip = Object.values(info.NetworkSettings?.Networks ?? {})[0]?.IPAddress || "10.244.0.2"
      return { containerId: container.id, ip }
    },
    stop: async (handle) => {
      made.delete(handle.containerId)
      await docker.getContainer(handle.containerId).remove({ force: true }).catch(() => undefined)
    },
    running: async (handle) => {
      try {
        return (await docker.getContainer(handle.containerId).inspect()).State.Running === true
      } catch {
        return false
      }
    },
    exec: async (handle, argv, tty) => {
      const exec = await docker.getContainer(handle.containerId).exec({
        Cmd: [...argv],
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: tty
      })
      const stream = (await exec.start({ hijack: true, stdin: true, Tty: tty })) as Duplex
      const stdout: Array<(data: Buffer) => void> = []
      const stderr: Array<(data: Buffer) => void> = []
      const early: Array<[number, Buffer]> = []
      const deliver = (type: number, piece: Buffer) => {
        const listeners = type === 2 ? stderr : stdout
        if (listeners.length === 0) early.push([type, Buffer.from(piece)])
        for (const listener of listeners) listener(piece)
      }
      const demuxer = new Demuxer(deliver)
      stream.on("data", (chunk: Buffer) => (tty ? deliver(1, chunk) : demuxer.push(chunk)))
      stream.on("error", () => {})
      const flush = () => {
        for (const [type, piece] of early.splice(0)) for (const listener of type === 2 ? stderr : stdout) listener(piece)
      }
      const exited = new Promise<number | undefined>((resolve) => {
        let done = false
        const finish = () => {
          if (done) return
          done = true
          exec.inspect().then((info) => resolve(info.ExitCode ?? undefined), () => resolve(undefined))
        }
        stream.on("end", finish)
        stream.on("close", finish)
      })
      return {
        onStdout: (listener) => {
          stdout.push(listener)
          flush()
        },
        onStderr: (listener) => {
          stderr.push(listener)
          flush()
        },
        write: (data) => void stream.write(data),
        // Docker takes a half-close of the hijacked connection as the end of stdin.
        closeStdin: () => void stream.end(),
        resize: (cols, rows) => void exec.resize({ w: cols, h: rows }).catch(() => undefined),
        pause: () => void stream.pause(),
        resume: () => void stream.resume(),
        exited,
        kill: () => void stream.destroy()
      }
    },
    close: async () => {
      const all = await docker.listContainers({ all: true, filters: { label: [`${FAKE_LABEL}=${fakeId}`] } }).catch(() => [])
      await Promise.all(all.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)))
      made.clear()
    }
  }
}
