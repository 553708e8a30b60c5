/**
 * Pods of the Kubernetes fake as bubblewrap sandboxes instead of containers, for the scale bench:
 * a container costs the engine a shim (~10 MB) and a second or so, a sandbox ~2 MB and tens of
 * milliseconds, so a thousand pods fit on one machine. Each pod is the Modal fake's sandbox
 * (ModalFakeSandbox.ts: its own pid, ipc and uts namespaces, /usr and /etc read-only from the host,
 * writable /home/agent and /tmp, no network); an exec enters its namespaces with nsenter. The
 * pod spec's image and command are not used: this is the host's userland.
 */
import { spawn } from "node:child_process"
import { mkdirSync, rmSync } from "node:fs"
import { join } from "node:path"
import { startSandbox, type SandboxProcess } from "../ModalFakeSandbox.js"
import type { PodExec, PodHandle, PodRuntime } from "./PodRuntime.js"

export const bwrapRuntime = (root: string): PodRuntime => {
  const pods = new Map<string, SandboxProcess>()
  let next = 0
  return {
    start: async () => {
      const id = `pod-${next++}`
      const dir = join(root, id)
      mkdirSync(dir, { recursive: true })
      const sandbox = await startSandbox(dir, true)
      pods.set(id, sandbox)
      return { containerId: id, ip: `10.244.${(next >> 8) & 255}.${next & 255}` }
    },
    stop: async (handle: PodHandle) => {
      pods.get(handle.containerId)?.child.kill("SIGKILL")
      pods.delete(handle.containerId)
      rmSync(join(root, handle.containerId), { recursive: true, force: true })
    },
    running: async (handle) => {
      const pod = pods.get(handle.containerId)
      return pod !== undefined && pod.child.exitCode === null && pod.child.signalCode === null
    },
    exec: async (handle, argv, tty) => {
      const pod = pods.get(handle.containerId)
      if (pod === undefined) throw new Error("the pod is gone")
      const command = tty ? ["script", "-qfec", argv.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(" "), "/dev/null"] : [...argv]
      const child = spawn("nsenter", ["-t", String(pod.pid), "-a", "-r", "-w", "--", ...command], {
        stdio: ["pipe", "pipe", "pipe"],
        env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root" }
      })
      child.stdin!.on("error", () => {})
      const exited = new Promise<number | undefined>((resolve) => child.on("close", (code) => resolve(code ?? undefined)))
      const exec: PodExec = {
        onStdout: (listener) => void child.stdout!.on("data", listener),
        onStderr: (listener) => void child.stderr!.on("data", listener),
        write: (data) => void child.stdin!.write(data),
        closeStdin: () => void child.stdin!.end(),
        resize: () => {},
        pause: () => void child.stdout!.pause(),
        resume: () => void child.stdout!.resume(),
        exited,
        kill: () => void child.kill("SIGKILL")
      }
      return exec
    },
    close: async () => {
      for (const pod of pods.values()) pod.child.kill("SIGKILL")
      pods.clear()
      rmSync(root, { recursive: true, force: true })
    }
  }
}
