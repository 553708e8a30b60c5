/**
 * The E2B fake's snapshots (E2BFake.ts routes to it), as the SDK's calls reach E2B's API:
 *   POST   /sandboxes/{id}/snapshots {name?}   201 {snapshotID, names}: a running sandbox's snapshot;
 *                                               404 for an unknown sandbox, 409 while it changes state
 *                                               or is paused (E2B snapshots the running VM in place)
 *   DELETE /templates/{templateID}             204; 404 for an unknown snapshot (the SDK: false)
 *   POST   /sandboxes {templateID: snapshotID}  a new sandbox booted from the snapshot
 * A snapshot is a template of its own: its id is `<template id>:default` (E2B's form without a
 * name), and it outlives the sandbox it was taken from (killing that sandbox leaves it).
 *
 * The copy is the host provider's checkpoint of the sandbox's "VM" (its workspace). Where the fake
 * falls short of E2B: E2B captures memory too, so processes of the snapshot run on in a new
 * sandbox; here a sandbox from a snapshot boots with the files only.
 */
import { randomBytes } from "node:crypto"
import type { ServerResponse } from "node:http"
import type { ManagedRuntime } from "effect"
import type { ComputerMetadata } from "../../src/domain/ComputerMetadata.js"
import type { Backend, Instance } from "../../src/services/Backend.js"
import { apiError, type FakeSandbox, sendJson } from "./E2BFakeEnvd.js"

/** E2B keeps a snapshot until it is deleted: no server owns it (the host provider's sweep leaves it). */
const FAKE_OWNER = { host: "e2b-fake", pid: process.pid, start: "e2b-fake" }

export interface FakeSnapshot {
  readonly snapshotID: string
  /** The sandbox it was taken from. */
  readonly sandboxID: string
  readonly envdVersion: string
  /** The host provider's copy. */
  readonly stored: string
}

export const make = (runtime: ManagedRuntime.ManagedRuntime<Backend, unknown>, backend: Backend["Type"]) => {
  const snapshots = new Map<string, FakeSnapshot>()
  const checkpoints = backend.checkpoints
  if (checkpoints === undefined) throw new Error("the E2B fake needs the host provider's checkpoints")

  /** The snapshot a template reference names (with or without its tag). */
  const named = (ref: string) => snapshots.get(ref.split(":")[0]!)

  const create = async (res: ServerResponse, sandbox: FakeSandbox) => {
    if (sandbox.state !== "running" || sandbox.instance === undefined) {
      return apiError(res, 409, `Sandbox '${sandbox.id}' is not running (${sandbox.state})`)
    }
    const templateID = `s${randomBytes(10).toString("hex")}`
    const captured = await runtime.runPromise(checkpoints.capture(sandbox.instance, templateID, FAKE_OWNER))
    const snapshot: FakeSnapshot = { snapshotID: `${templateID}:default`, sandboxID: sandbox.id, envdVersion: sandbox.envdVersion, stored: captured.stored }
    snapshots.set(templateID, snapshot)
    return sendJson(res, 201, { snapshotID: snapshot.snapshotID, names: [] })
  }

  const remove = async (res: ServerResponse, ref: string) => {
    const snapshot = named(ref)
    if (snapshot === undefined) return apiError(res, 404, `template '${ref}' not found`)
    snapshots.delete(ref.split(":")[0]!)
    await runtime.runPromise(checkpoints.remove(snapshot.stored))
    return sendJson(res, 204, undefined)
  }

  /** A new sandbox's VM from a snapshot. */
  const boot = (snapshot: FakeSnapshot, metadata: ComputerMetadata): Promise<Instance> => runtime.runPromise(checkpoints.restore(snapshot.stored, metadata))

  return { named, create, remove, boot, all: () => [...snapshots.values()] }
}
