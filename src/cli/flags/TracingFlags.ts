/** Traces: OTLP over HTTP to a collector, with OpenTelemetry's own variables honoured. */
import { defaultSettings } from "../../services/Settings.js"
import * as Flag from "../Flag.js"

export const tracingFlags = {
  otelEndpoint: Flag.optionalText("otel-endpoint", {
    group: "tracing options",
    metavar: "URL",
    // The signal's own variable first, as OpenTelemetry's SDKs do; a URL ending in /v1/traces is used as it is.
    alsoFrom: ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"],
    pattern: { test: /^https?:\/\/[^\s/?#]+(?:[/?#]\S*)?$/i, says: "must be an http:// or https:// URL" },
    shownDefault: "none",
    help: "Export traces by OTLP/HTTP to this collector"
  }),
  otelServiceName: Flag.text("otel-service-name", {
    group: "tracing options",
    default: defaultSettings.otel.serviceName,
    metavar: "NAME",
    alsoFrom: ["OTEL_SERVICE_NAME"],
    more: true,
    help: "service.name of the exported spans"
  })
}
