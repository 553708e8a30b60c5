/**
 * Preview URLs on Fly: machine services. Fly's proxy serves a port inside a machine when the
 * machine's config has a service for it (`internal_port`, and the app's public `ports` with their
 * `handlers`), at the app's address, `https://<app>.fly.dev:<port>/`. Every machine of the app
 * shares that address, and Fly balances one public port across all machines that serve it; so each
 * computer's ports get public ports of their own (from PUBLIC_FIRST…PUBLIC_LAST, none another
 * machine of the app serves), and a URL reaches that computer only.
 *
 * The services are declared when the machine is made (`--fly-preview-port`): changing a machine's
 * config later replaces the machine (Fly's update restarts it), which would end the very server a
 * preview is for. So exposing a port reads the machine's services and revoking cannot withdraw one:
 * Fly serves it while the machine runs, like E2B hosts and Modal tunnels.
 */
import type { Machine } from "./FlyApi.js"

/** The public ports handed to machines' services (TLS and HTTP by Fly's proxy). */
export const PUBLIC_FIRST = 20000
export const PUBLIC_LAST = 29999

/** The public ports the machines' services take. */
export const takenPorts = (machines: ReadonlyArray<Machine>): ReadonlySet<number> =>
  new Set(machines.flatMap((machine) =>
    machine.state === "destroyed"
      ? []
      : (machine.config?.services ?? []).flatMap((service) => (service.ports ?? []).flatMap((port) => (typeof port.port === "number" ? [port.port] : [])))
  ))

/**
 * A free public port for each port inside, searched from `start` (a random place in the range, so
 * that two servers of one app rarely pick the same port at the same moment); undefined when the
 * range is full.
 */
export const allocate = (inside: ReadonlyArray<number>, taken: ReadonlySet<number>, start: number): ReadonlyArray<number> | undefined => {
  const size = PUBLIC_LAST - PUBLIC_FIRST + 1
  const chosen: Array<number> = []
  for (let i = 0; i < size && chosen.length < inside.length; i++) {
    const port = PUBLIC_FIRST + ((start - PUBLIC_FIRST + i) % size + size) % size
    if (!taken.has(port)) chosen.push(port)
  }
  return chosen.length === inside.length ? chosen : undefined
}

/** The services of a new machine: each port inside on its public port, TLS and HTTP; never started by the proxy. */
export const services = (inside: ReadonlyArray<number>, public_: ReadonlyArray<number>) =>
  inside.map((port, i) => ({
    protocol: "tcp",
    internal_port: port,
    // The kernel owns the machine's life: the proxy neither stops nor starts it.
    autostop: "off",
    autostart: false,
    ports: [{ port: public_[i]!, handlers: ["tls", "http"] }]
  }))

/** The public port a machine's services give a port inside it, or undefined. */
export const publicPortOf = (machine: Machine, inside: number): number | undefined =>
  (machine.config?.services ?? []).find((service) => service.internal_port === inside)?.ports?.find((port) => typeof port.port === "number")?.port ?? undefined

/** The ports inside a machine that its services serve. */
export const servedPorts = (machine: Machine): ReadonlyArray<number> =>
  (machine.config?.services ?? []).flatMap((service) => (typeof service.internal_port === "number" ? [service.internal_port] : []))

export const urlOf = (app: string, publicPort: number) => `https://${app}.fly.dev:${publicPort}/`
