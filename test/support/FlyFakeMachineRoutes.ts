/**
 * The Fly fake's routes of one machine (`/v1/apps/{app}/machines/{id}[/{action}[/{key}]]`): get,
 * destroy, wait, start, stop, restart, exec and metadata, with the states and statuses Fly
 * documents (an action on a machine in the wrong state is 400 `failed_precondition`). The fake
 * (FlyFake.ts) owns the machines and their state changes; these routes ask it through `controls`.
 */
import { rmSync } from "node:fs"
import type { ExecChildren } from "./FlyFakeVm.js"
import type { FakeMachine } from "./FlyFake.js"

/** What a machine's routes may do to it (the fake's own machine model). */
export interface MachineControls {
  readonly launch: (machine: FakeMachine) => void
  /** Stops it; `then` runs once it is stopped (a restart). */
  readonly stop: (machine: FakeMachine, then?: () => void) => void
  readonly destroy: (machine: FakeMachine) => void
  readonly view: (machine: FakeMachine) => unknown
  readonly waitFor: (machine: FakeMachine, state: string, timeoutMs: number) => Promise<boolean>
  readonly execChildren: () => ExecChildren
}

export const machineRoute = async (
  controls: MachineControls,
  machine: FakeMachine,
  method: string,
  url: URL,
  sub: string | undefined,
  key: string | undefined,
  body: Record<string, any>,
  reply: (code: number, body: unknown, headers?: Record<string, string>) => void
) => {
  const precondition = (what: string) => reply(400, { error: `failed_precondition: unable to ${what}: machine is ${machine.state}` })
  switch (`${method} ${sub ?? ""}`) {
    case "GET ":
      return reply(200, controls.view(machine))
    case "DELETE ": {
      if (machine.state === "destroyed") return reply(404, { error: "machine not found" })
      const force = url.searchParams.get("force") === "true"
      if (machine.state === "started" && !force) return precondition("destroy machine, not currently stopped")
      controls.destroy(machine)
      return reply(200, {})
    }
    case "GET wait": {
      const state = url.searchParams.get("state") ?? "started"
      if (state === "stopped" && !url.searchParams.get("instance_id")) {
        return reply(400, { error: "invalid_argument: instance_id is required when waiting for the stopped state" })
      }
      const timeout = Number(url.searchParams.get("timeout") ?? "60")
      if (!Number.isInteger(timeout) || timeout < 1 || timeout > 60) return reply(400, { error: "invalid_argument: timeout must be between 1 and 60 seconds" })
      const reached = await controls.waitFor(machine, state, timeout * 1000)
      return reached ? reply(200, { ok: true, state }) : reply(408, { error: `deadline_exceeded: machine did not reach state ${state}` })
    }
    case "POST start":
      if (["destroyed", "destroying", "stopping", "suspending"].includes(machine.state)) return precondition("start")
      if (machine.state !== "started" && machine.state !== "starting") controls.launch(machine)
      return reply(200, {})
    case "POST stop":
      if (machine.state !== "started") return precondition("stop")
      controls.stop(machine)
      return reply(200, {})
    case "POST restart":
      if (machine.state !== "started") return precondition("restart")
      controls.stop(machine, () => {
        if (!["restart", "always"].includes(machine.config["rootfs"]?.persist)) rmSync(machine.vm.rootfs(), { recursive: true, force: true })
        controls.launch(machine)
      })
      return reply(200, {})
    case "POST exec": {
      if (machine.state !== "started" || !machine.vm.ready) return precondition("exec")
      const argv: Array<string> | undefined = Array.isArray(body["command"]) ? body["command"] : undefined
      if (argv === undefined || argv.length === 0) return reply(400, { error: "invalid_argument: command is required" })
      const timeout = typeof body["timeout"] === "number" && body["timeout"] > 0 ? body["timeout"] : 60
      const result = await machine.vm.exec(argv, typeof body["stdin"] === "string" ? body["stdin"] : "", timeout, controls.execChildren())
      if (result === undefined) return reply(400, { error: "failed_precondition: the machine stopped while the command ran" })
      if (result === "timeout") return reply(408, { error: "deadline_exceeded: the command did not finish within its timeout" })
      return reply(200, result)
    }
    case "GET metadata":
      return reply(200, machine.config["metadata"] ?? {})
    case "POST metadata":
    case "DELETE metadata": {
      const name = key === undefined ? undefined : decodeURIComponent(key)
      if (name === undefined) return reply(400, { error: "invalid_argument: metadata key is required" })
      const metadata = { ...machine.config["metadata"] }
      if (method === "POST") {
        if (typeof body["value"] !== "string") return reply(400, { error: "invalid_argument: value is required" })
        metadata[name] = body["value"]
      } else delete metadata[name]
      machine.config = { ...machine.config, metadata }
      return reply(204, undefined)
    }
    default:
      return reply(404, { error: "not found" })
  }
}
