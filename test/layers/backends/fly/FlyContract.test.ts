import { assert, describe, it } from "@effect/vitest"
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
    assert.match(checkResponse({ method: "POST", pathname: `${machines}/m1/exec`, status: 409, body: { error: "not started" } }).join(), /status 409 is not documented/)
    assert.match(checkResponse({ method: "POST", pathname: `${machines}/m1/exec`, status: 412, body: { error: "x" } }).join(), /status 412 is not documented/)
    assert.deepStrictEqual(checkResponse({ method: "POST", pathname: `${machines}/m1/exec`, status: 429, body: { error: "slow down" } }), [])
    assert.deepStrictEqual(checkResponse({ method: "GET", pathname: `${machines}/m1/wait`, status: 408, body: { error: "deadline_exceeded" } }), [])
    assert.deepStrictEqual(checkResponse({ method: "POST", pathname: machines, status: 422, body: { error: "already_exists" } }), [])
    assert.match(checkResponse({ method: "POST", pathname: machines, status: 503, body: { message: "down" } }).join(), /message: not a property/)
    assert.deepStrictEqual(checkResponse({ method: "POST", pathname: `${machines}/m1/metadata/k`, status: 204, body: undefined }), [])
    assert.match(checkResponse({ method: "GET", pathname: `${machines}/m1`, status: 200, body: { id: "m1", state: "started", secret: 1 } }).join(), /secret/)
  })

  it("a Swagger 2 artifact (type object beside a string enum) is checked against the enum", () => {
    const scheme = document.components.schemas["fly.HTTPHealthcheck"]!.properties!["scheme"]!
    assert.deepStrictEqual(validate("https", scheme), [])
    assert.isNotEmpty(validate("gopher", scheme))
  })
})
