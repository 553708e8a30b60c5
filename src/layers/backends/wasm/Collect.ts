/**
 * A full garbage collection, for a worker that has finished a job and waits in a pool: what the
 * job referenced (the computer's tree, file contents in shared memory, a module instance's
 * memory) is released now rather than at a collection an idle worker may never make. Only for
 * worker threads (it exposes V8's `gc` to contexts created after it).
 */
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"

let gc: (() => void) | undefined

export const collectGarbage = () => {
  if (gc === undefined) {
    setFlagsFromString("--expose-gc")
    gc = runInNewContext("gc") as () => void
  }
  gc()
}
