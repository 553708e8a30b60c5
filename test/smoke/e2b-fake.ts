// Starts the E2B fake and prints the variables that point the smoke test (e2b.test.ts) at it:
//   npx vite-node test/smoke/e2b-fake.ts
// then, in another shell, the printed line followed by `npx vitest run test/smoke/e2b.test.ts`.
import * as E2BFake from "../support/E2BFake.js"

const fake = await E2BFake.start()
console.log(
  `E2B_API_KEY=${fake.apiKey} E2B_API_URL=${fake.url} E2B_SANDBOX_URL=${fake.url} E2B_SMOKE_HOME=${E2BFake.FAKE_HOME} ` +
    `E2B_SMOKE_RECORD_DIR=${process.env.TMPDIR ?? "/tmp"}/e2b-smoke-fake`
)
const stop = () => void fake.close().then(() => process.exit(0))
process.on("SIGINT", stop)
process.on("SIGTERM", stop)
