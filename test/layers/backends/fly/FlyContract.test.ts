import { assert, describe, it } from "@effect/vitest"
import { Redacted } from "effect"
import * as FlyBackend from "../../../../src/layers/backends/fly/FlyBackend.js"
import * as FlyMetadata from "../../../../src/layers/backends/fly/FlyMetadata.js"
import * as FlyProvider from "../../../../src/layers/backends/fly/FlyProvider.js"
import { checkRequest, checkResponse, document, validate } from "../../../support/contracts/fly/OpenApiContract.js"

const machines = "/v1/apps/kt/machines"
const request = (method: string, pathname: string, body?: unknown, query = "") => ({
  method,
  pathname,
  query: new URLSearchParams(query),
  body
})

describe("Fly's OpenAPI contract (the copy the fake is checked against)", () => {
  it("every schema reference resolves", () => {
    const refs = JSON.stringify(document).match(/"#\/components\/schemas\/[^"]+"/g) ?? []
    assert.isAbove(refs.length, 50)
    for (const ref of refs) {
      const name = ref.slice('"#/components/schemas/'.length, -1)
      assert.isDefined(document.components.schemas[name], name)
    }
  })

  it("the adapter's create body is a valid CreateMachineRequest", () => {
    const metadata = {
      id: "c1",
      temporary: true,
      image: "debian:bookworm-slim",
      created: "2026-11-30T00:00:00Z",
      instance: "i",
      owner: { host: "h", pid: 7, start: "123" },
      expires: "2026-11-30T00:10:00Z",
      nonce: "n1",
      pooled: true
    }
    const options = { region: "fra", guest: { cpu_kind: "shared" as const, cpus: 1, memory_mb: 512 }, rootfsSizeGb: 8 }
    assert.deepStrictEqual(checkRequest(request("POST", machines, FlyProvider.createBody(options, metadata))), [])
    assert.deepStrictEqual(checkRequest(request("POST", machines, FlyProvider.createBody({ ...options, region: undefined }, { ...metadata, temporary: false }))), [])
  })

  it("the backend refuses at startup a guest Fly refuses: memory outside its CPU kind's range for the CPU count", () => {
    const base = { app: "kt", token: Redacted.make("t"), image: "debian", region: undefined, cpuKind: "shared" as const, cpus: 1, memoryMb: 512, rootfsSizeGb: undefined, apiUrl: "http://x", network: false }
    assert.isUndefined(FlyBackend.invalidOptions(base))
    assert.isUndefined(FlyBackend.invalidOptions({ ...base, cpuKind: "performance", cpus: 2, memoryMb: 4096 }))
    assert.match(FlyBackend.invalidOptions({ ...base, cpuKind: "performance", memoryMb: 512 }) ?? "", /performance CPU needs 2048–8192 MB of memory per CPU \(1 CPU: 2048–8192 MB\), got 512 MB/)
    assert.match(FlyBackend.invalidOptions({ ...base, cpus: 2, memoryMb: 8192 }) ?? "", /shared CPU needs 256–2048 MB of memory per CPU \(2 CPUs: 512–4096 MB\), got 8192 MB/)
  })

  it("catches what Fly would silently ignore or refuse", () => {
    const misspelt = checkRequest(request("POST", machines, { config: { image: "x", restart: { polcy: "no" } } }))
    assert.match(misspelt.join(), /restart\.polcy: not a property/)
    const wrongType = checkRequest(request("POST", `${machines}/m1/exec`, { command: "ls -l", timeout: 30 }))
    assert.match(wrongType.join(), /command: expected an array/)
    const badEnum = checkRequest(request("POST", machines, { config: { image: "x", rootfs: { persist: "forever" } } }))
    assert.match(badEnum.join(), /persist: "forever" is not one of/)
    assert.match(checkRequest(request("GET", `${machines}/m1/wait`, undefined, "state=running")).join(), /not one of/)
    assert.match(checkRequest(request("GET", machines, undefined, "labels=a")).join(), /query parameter labels is not declared/)
    assert.deepStrictEqual(checkRequest(request("GET", machines, undefined, `metadata.${Object.keys(FlyMetadata.filter({}))[0]}=true`)), [], "documented in the docs")
    assert.match(checkRequest(request("POST", `${machines}/m1/teleport`, {})).join(), /no such operation/)
  })

  it("answers: the documented status and body, or a status documented for every call with an error body", () => {
    assert.deepStrictEqual(checkResponse({ method: "POST", pathname: `${machines}/m1/exec`, status: 200, body: { stdout: "", stderr: "", exit_code: 0, exit_signal: 0 } }), [])
    assert.match(checkResponse({ method: "POST", pathname: `${machines}/m1/exec`, status: 200, body: { stdout: "", exit_code: "0" } }).join(), /expected an integer/)
    assert.match(checkResponse({ method: "POST", pathname: `${machines}/m1/exec`, status: 418, body: { error: "teapot" } }).join(), /status 418 is not documented/)
    assert.deepStrictEqual(checkResponse({ method: "POST", pathname: `${machines}/m1/exec`, status: 429, body: { error: "slow down" } }), [])
    assert.deepStrictEqual(checkResponse({ method: "GET", pathname: `${machines}/m1/wait`, status: 408, body: { error: "deadline_exceeded" } }), [])
    assert.deepStrictEqual(checkResponse({ method: "POST", pathname: machines, status: 422, body: { error: "already_exists" } }), [])
    assert.match(checkResponse({ method: "POST", pathname: machines, status: 503, body: { message: "down" } }).join(), /message: not a property/)
    assert.deepStrictEqual(checkResponse({ method: "POST", pathname: `${machines}/m1/metadata/k`, status: 204, body: undefined }), [])
    assert.match(checkResponse({ method: "GET", pathname: `${machines}/m1`, status: 200, body: { id: "m1", state: "started", secret: 1 } }).join(), /secret/)
  })

  it("Fly's 409 and 412 are answers of any call: a lease held by another, no capacity, a version or volume precondition", () => {
    const lease = { error: "aborted: machine ID m1 lease currently held by x@tokens.fly.io, expires at 2026-08-14T09:57:35Z" }
    assert.deepStrictEqual(checkResponse({ method: "POST", pathname: `${machines}/m1/start`, status: 409, body: lease }), [])
    const volume = { error: "insufficient resources to create new machine with existing volume 'data'" }
    assert.deepStrictEqual(checkResponse({ method: "POST", pathname: machines, status: 412, body: volume }), [])
    assert.match(checkResponse({ method: "POST", pathname: machines, status: 409, body: { reason: "x" } }).join(), /reason: not a property/)
  })

  it("what Fly says only in prose: instance_id to wait for stopped; a guest's memory for its CPU kind and count", () => {
    assert.match(
      checkRequest(request("GET", `${machines}/m1/wait`, undefined, "state=stopped&timeout=30")).join(),
      /instance_id is required when state=stopped/
    )
    assert.deepStrictEqual(checkRequest(request("GET", `${machines}/m1/wait`, undefined, "state=stopped&instance_id=01H&timeout=30")), [])
    assert.deepStrictEqual(checkRequest(request("GET", `${machines}/m1/wait`, undefined, "state=started&timeout=30")), [])
    const create = (guest: object) => checkRequest(request("POST", machines, { config: { image: "x", guest } }))
    assert.deepStrictEqual(create({ cpu_kind: "shared", cpus: 2, memory_mb: 4096 }), [])
    assert.deepStrictEqual(create({ cpu_kind: "performance", cpus: 1, memory_mb: 2048 }), [])
    assert.match(create({ cpu_kind: "shared", cpus: 1, memory_mb: 4096 }).join(), /4096 MB is outside 256–2048 MB for 1 shared CPU/)
    assert.match(create({ cpu_kind: "performance", cpus: 2, memory_mb: 2048 }).join(), /2048 MB is outside 4096–16384 MB for 2 performance CPU/)
    assert.match(create({ cpu_kind: "shared", cpus: 1, memory_mb: 300 }).join(), /300 is not a multiple of 256/)
  })

  it("a Swagger 2 artifact (type object beside a string enum) is checked against the enum", () => {
    const scheme = document.components.schemas["fly.HTTPHealthcheck"]!.properties!["scheme"]!
    assert.deepStrictEqual(validate("https", scheme), [])
    assert.isNotEmpty(validate("gopher", scheme))
  })
})
