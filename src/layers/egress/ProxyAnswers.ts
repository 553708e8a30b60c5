/**
 * The answers the egress proxy gives itself — refusals, errors, the 403 that names the rule to
 * add — as plain text with an `x-kilntainers-egress` header, on a raw socket (CONNECT, before or
 * instead of parsing) or through Node's response. They never carry a secret: only names, ports
 * and the flag to use.
 */
import type { ServerResponse } from "node:http"
import type { Duplex } from "node:stream"
import * as HostPattern from "./HostPattern.js"

export const PHRASE = { 400: "Bad Request", 403: "Forbidden", 421: "Misdirected Request", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout" }
export type Status = keyof typeof PHRASE

/** A 403's reason phrase: what `curl` and python print for a refused CONNECT. */
export const denialPhrase = (target: HostPattern.Authority) =>
  `Forbidden by the kilntainers egress allowlist (--allow-host ${HostPattern.formatHost(target.host)})`

const body = (message: string) => `kilntainers egress: ${message}\n`

/** A refusal by policy (the allowlist, a credential's binding) rather than an error on the way. */
const kind = (status: Status) => (status === 403 || status === 421 ? "denied" : "error")

/** A whole response written on a raw socket (CONNECT answers, refusals before any parsing), then EOF. */
export const rawAnswer = (socket: Duplex, status: Status, message: string, phrase = PHRASE[status]) => {
  const text = body(message)
  if (socket.destroyed || socket.writableEnded) return
  socket.end(
    `HTTP/1.1 ${status} ${phrase}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(text)}\r\n` +
      `x-kilntainers-egress: ${kind(status)}\r\nconnection: close\r\n\r\n${text}`
  )
}

export const answer = (res: ServerResponse, status: Status, message: string, phrase = PHRASE[status]) => {
  if (res.headersSent) return void res.destroy()
  const text = body(message)
  res.writeHead(status, phrase, {
    "content-type": "text/plain; charset=utf-8",
    "content-length": Buffer.byteLength(text),
    "x-kilntainers-egress": kind(status)
  })
  res.end(text)
}
