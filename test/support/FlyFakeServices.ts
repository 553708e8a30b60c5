/**
 * The Fly fake's machine services (`config.services`): the checks Fly's API makes of them on
 * create (beyond the OpenAPI document's types, which the contract checks), and how Fly's proxy
 * routes a public port of the app's address to the machines that serve it — every running machine
 * with a service on that port, balanced between them, which is why each computer needs public
 * ports of its own.
 */
import type { FakeMachine } from "./FlyFake.js"

const HANDLERS = new Set(["tls", "http", "proxy_proto", "pg_tls", "edge_http"])
const isPort = (value: unknown): value is number => typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= 65535

/** Why a create's `config.services` would be refused (Fly's `invalid_argument`), or undefined. */
export const invalidServices = (services: unknown): string | undefined => {
  if (services === undefined) return undefined
  if (!Array.isArray(services)) return "services must be a list"
  const seen = new Set<string>()
  for (const [i, service] of services.entries()) {
    if (typeof service !== "object" || service === null) return `services[${i}] must be an object`
    if (service.protocol !== "tcp" && service.protocol !== "udp") return `services[${i}].protocol must be tcp or udp`
    if (!isPort(service.internal_port)) return `services[${i}].internal_port must be a port from 1 to 65535`
    if (!Array.isArray(service.ports) || service.ports.length === 0) return `services[${i}] needs at least one port`
    for (const [j, port] of service.ports.entries()) {
      const ranged = port?.start_port !== undefined || port?.end_port !== undefined
      if (ranged ? !(isPort(port.start_port) && isPort(port.end_port) && port.start_port <= port.end_port) : !isPort(port?.port)) {
        return `services[${i}].ports[${j}] needs a port (or start_port ≤ end_port) from 1 to 65535`
      }
      const handlers: unknown = port.handlers ?? []
      if (!Array.isArray(handlers) || handlers.some((handler) => !HANDLERS.has(handler))) {
        return `services[${i}].ports[${j}].handlers must be among ${[...HANDLERS].join(", ")}`
      }
      if (service.protocol === "udp" && handlers.length > 0) return `services[${i}]: udp services take no handlers`
      const key = `${service.protocol}/${port.port ?? `${port.start_port}-${port.end_port}`}`
      if (seen.has(key)) return `services: public port ${key} is given twice`
      seen.add(key)
    }
  }
  return undefined
}

/** The machines Fly's proxy balances a public TCP port of the app's address between: running ones that serve it. */
export const machinesServing = (machines: Iterable<FakeMachine>, publicPort: number): ReadonlyArray<FakeMachine> =>
  [...machines].filter((machine) =>
    machine.state === "started" &&
    (machine.config["services"] ?? []).some((service: any) =>
      service.protocol === "tcp" &&
      (service.ports ?? []).some((port: any) => port.port === publicPort || (port.start_port <= publicPort && publicPort <= port.end_port))
    )
  )
