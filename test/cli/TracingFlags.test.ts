import { assert, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import { built, errorLine, printConfig, runCli } from "./CliRunner.js"

describeIf(built, "a built CLI (npm run build)")("tracing flags and OpenTelemetry's variables", () => {
  it("no endpoint by default; the service is kilntainers", async () => {
    const config = await printConfig([])
    assert.deepStrictEqual(config.flags["otel-endpoint"], { value: null, from: "default" })
    assert.deepStrictEqual(config.flags["otel-service-name"], { value: "kilntainers", from: "default" })
  })

  it("reads OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME; the traces variable, then our own, take precedence", async () => {
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_SERVICE_NAME: "agents-box" }
    let config = await printConfig([], base)
    assert.deepStrictEqual(config.flags["otel-endpoint"], { value: "http://collector:4318", from: "OTEL_EXPORTER_OTLP_ENDPOINT" })
    assert.deepStrictEqual(config.flags["otel-service-name"], { value: "agents-box", from: "OTEL_SERVICE_NAME" })
    config = await printConfig([], { ...base, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://traces:4318/v1/traces" })
    assert.strictEqual(config.flags["otel-endpoint"]!.from, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    config = await printConfig([], { ...base, KILNTAINERS_OTEL_ENDPOINT: "https://ours.example" })
    assert.deepStrictEqual(config.flags["otel-endpoint"], { value: "https://ours.example", from: "KILNTAINERS_OTEL_ENDPOINT" })
    config = await printConfig(["--otel-endpoint", "http://127.0.0.1:4318", "--otel-service-name", "cli-name"], base)
    assert.strictEqual(config.flags["otel-endpoint"]!.from, "command line")
    assert.strictEqual(config.flags["otel-service-name"]!.value, "cli-name")
  })

  it("refuses an endpoint that is not an http(s) URL, naming where it came from", async () => {
    let run = await runCli(["--otel-endpoint", "collector:4318"])
    assert.strictEqual(run.code, 1)
    assert.include(errorLine(run), "--otel-endpoint must be an http:// or https:// URL (got 'collector:4318')")
    run = await runCli([], { env: { OTEL_EXPORTER_OTLP_ENDPOINT: "grpc://collector:4317" } })
    assert.strictEqual(run.code, 1)
    assert.include(errorLine(run), "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL")
  })
})
