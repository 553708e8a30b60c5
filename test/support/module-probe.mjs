// Preloaded with `node --import` (NODE_OPTIONS) into a server under test: records every module whose
// resolved URL matches KT_MODULE_PROBE_MATCH into the file KT_MODULE_PROBE, so a test can tell
// which packages a run really loaded (for example: none of OpenTelemetry without --otel-endpoint).
import { register } from "node:module"

register("./module-probe-hooks.mjs", import.meta.url)
