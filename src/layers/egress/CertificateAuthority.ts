/**
 * The certificate authority of the egress proxy, for the hosts it intercepts (those with
 * `--egress-header` rules): generated once per state directory, then loaded.
 *
 * - `<stateDir>/egress/ca.pem` holds the CA's private key and certificate, mode 0600, owned by the
 *   server's user, in a 0700 directory. A file that others may read, or that another user owns, is
 *   refused rather than trusted. It is published with link(2), so two servers starting together
 *   on one state directory end up with the same CA.
 * - Keys are ECDSA P-256 with SHA-256 (every TLS client accepts them; fast to sign). The X.509
 *   work is @peculiar/x509's, on WebCrypto: no hand-written ASN.1.
 * - A leaf certificate per host (DNS or IP subject alternative name, serverAuth, 7 days, backdated
 *   an hour for clock skew), all leaves sharing one key pair made at startup, so a new host costs a
 *   signature, not a key generation. Leaves are cached in a bounded LRU and made again at half
 *   their life; concurrent requests for one host share one signature.
 */
import "reflect-metadata"
import * as x509 from "@peculiar/x509"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import { randomBytes, webcrypto } from "node:crypto"
import { link, lstat, mkdir, open, readFile, unlink } from "node:fs/promises"
import { isIP } from "node:net"
import { join } from "node:path"
import { createSecureContext, type SecureContext } from "node:tls"
import { EgressError } from "./EgressError.js"

x509.cryptoProvider.set(webcrypto as unknown as Crypto)

const ALGORITHM = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const
const DAY = 24 * 60 * 60 * 1000
const CA_LIFETIME = 3650 * DAY
const LEAF_LIFETIME = 7 * DAY
const BACKDATE = 60 * 60 * 1000

export interface CertificateAuthority {
  /** The CA certificate (PEM): what computers trust. */
  readonly certificate: string
  /** A TLS context presenting a certificate for `host` (canonical name or address), signed by the CA. */
  readonly leaf: (host: string) => Effect.Effect<SecureContext, EgressError>
}

export interface CertificateAuthorityOptions {
  /** The directory of the CA file (`<stateDir>/egress`); created 0700 if missing. */
  readonly dir: string
  /** Most leaf certificates kept (default 256). */
  readonly cacheSize?: number | undefined
}

const fail = (reason: string) => (error: unknown) =>
  new EgressError({ reason: `${reason}: ${error instanceof Error ? error.message : String(error)}` })

const serial = () => {
  const bytes = randomBytes(16)
  bytes[0] = bytes[0]! & 0x7f
  return bytes.toString("hex")
}

const pemPrivateKey = async (key: CryptoKey) =>
  x509.PemConverter.encode(await webcrypto.subtle.exportKey("pkcs8", key as webcrypto.CryptoKey), "PRIVATE KEY")

interface Loaded {
  readonly privateKey: CryptoKey
  readonly certificate: x509.X509Certificate
}

const generate = (now: number): Promise<{ readonly loaded: Loaded; readonly pem: string }> =>
  (async () => {
    const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]) as CryptoKeyPair
    const certificate = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: serial(),
      name: new x509.Name([{ CN: [`kilntainers egress CA ${randomBytes(4).toString("hex")}`] }, { O: ["kilntainers"] }]),
      notBefore: new Date(now - BACKDATE),
      notAfter: new Date(now + CA_LIFETIME),
      signingAlgorithm: ALGORITHM,
      keys,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey)
      ]
    })
    const pem = `${await pemPrivateKey(keys.privateKey)}\n${certificate.toString("pem")}\n`
    return { loaded: { privateKey: keys.privateKey, certificate }, pem }
  })()

const parse = async (pem: string): Promise<Loaded> => {
  const key = /-----BEGIN PRIVATE KEY-----[\s\S]+?-----END PRIVATE KEY-----/.exec(pem)
  const cert = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(pem)
  if (key === null || cert === null) throw new Error("it does not hold a private key and a certificate")
  const privateKey = await webcrypto.subtle.importKey("pkcs8", x509.PemConverter.decodeFirst(key[0]), ALGORITHM, false, ["sign"])
  return { privateKey: privateKey as CryptoKey, certificate: new x509.X509Certificate(cert[0]) }
}

/** The CA file of the directory: loaded, or made and published once. */
const loadOrCreate = (dir: string) =>
  Effect.gen(function*() {
    const path = join(dir, "ca.pem")
    yield* Effect.tryPromise({ try: () => mkdir(dir, { recursive: true, mode: 0o700 }), catch: fail(`cannot create ${dir}`) })
    const load = Effect.tryPromise({
      try: async () => {
        const info = await lstat(path)
        if (!info.isFile()) throw new Error("it is not a regular file")
        if (process.getuid !== undefined && info.uid !== process.getuid()) throw new Error("it belongs to another user")
        if ((info.mode & 0o077) !== 0) throw new Error(`others may read it (mode ${(info.mode & 0o777).toString(8)}); chmod 600 it`)
        return await parse(await readFile(path, "utf8"))
      },
      catch: fail(`the egress CA ${path} cannot be used`)
    })
    const exists = yield* Effect.tryPromise(() => lstat(path)).pipe(Effect.as(true), Effect.orElseSucceed(() => false))
    if (exists) return yield* load
    const now = yield* Clock.currentTimeMillis
    const made = yield* Effect.tryPromise({ try: () => generate(now), catch: fail("cannot generate the egress CA") })
    const temporary = `${path}.${process.pid}.${randomBytes(4).toString("hex")}`
    const published = yield* Effect.tryPromise({
      try: async () => {
        const file = await open(temporary, "wx", 0o600)
        try {
          await file.writeFile(made.pem)
          await file.sync()
        } finally {
          await file.close()
        }
        try {
          await link(temporary, path)
          return true
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === "EEXIST") return false
          throw error
        } finally {
          await unlink(temporary).catch(() => undefined)
        }
      },
      catch: fail(`cannot write the egress CA ${path}`)
    })
    // Another server published one first: use theirs, so computers trust one CA.
    return published ? made.loaded : yield* load
  })

/** Loads (or creates) the CA of `options.dir`. */
export const make = (options: CertificateAuthorityOptions): Effect.Effect<CertificateAuthority, EgressError> =>
  Effect.gen(function*() {
    const ca = yield* loadOrCreate(options.dir)
    const leafKeys = yield* Effect.tryPromise({
      try: async () => {
        const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]) as CryptoKeyPair
        return { keys, pem: await pemPrivateKey(keys.privateKey) }
      },
      catch: fail("cannot generate the leaf key")
    })
    const authorityKeyId = yield* Effect.tryPromise({
      try: () => x509.AuthorityKeyIdentifierExtension.create(ca.certificate.publicKey),
      catch: fail("cannot read the CA's key identifier")
    })
    const certificate = ca.certificate.toString("pem")
    const capacity = options.cacheSize ?? 256

    const sign = (host: string, now: number) =>
      Effect.tryPromise({
        try: async () => {
          const leaf = await x509.X509CertificateGenerator.create({
            serialNumber: serial(),
            subject: new x509.Name([{ CN: [host] }]),
            issuer: ca.certificate.subjectName,
            notBefore: new Date(now - BACKDATE),
            notAfter: new Date(now + LEAF_LIFETIME),
            signingAlgorithm: ALGORITHM,
            publicKey: leafKeys.keys.publicKey,
            signingKey: ca.privateKey,
            extensions: [
              new x509.BasicConstraintsExtension(false, undefined, true),
              new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
              new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
              new x509.SubjectAlternativeNameExtension([{ type: isIP(host) === 0 ? "dns" : "ip", value: host }]),
              authorityKeyId
            ]
          })
          return createSecureContext({ key: leafKeys.pem, cert: `${leaf.toString("pem")}\n${certificate}\n` })
        },
        catch: fail(`cannot issue a certificate for ${host}`)
      })

    const cache = new Map<string, { readonly renewAt: number; readonly context: Effect.Effect<SecureContext, EgressError> }>()
    const leaf = (host: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const hit = cache.get(host)
        if (hit !== undefined && hit.renewAt > now) {
          cache.delete(host)
          cache.set(host, hit)
          return yield* hit.context
        }
        const context = yield* Effect.cached(sign(host, now))
        cache.delete(host)
        cache.set(host, { renewAt: now + LEAF_LIFETIME / 2, context })
        while (cache.size > capacity) cache.delete(cache.keys().next().value!)
        return yield* context.pipe(Effect.tapError(() => Effect.sync(() => cache.delete(host))))
      })
    return { certificate, leaf }
  })

/** How many leaves the cache holds (tests). */
export type LeafCache = ReadonlyMap<string, unknown>
