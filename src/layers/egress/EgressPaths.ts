/** Where egress puts its certificates inside computers (a module light enough for every backend to load). */

/** Where the bundle goes inside a computer, and where every variable points. */
export const CA_BUNDLE_PATH = "/etc/ssl/certs/ca-certificates.crt"

/** Where the interception CA alone goes, in containers (`update-ca-certificates` keeps it). */
export const CA_CERTIFICATE_PATH = "/usr/local/share/ca-certificates/kilntainers-egress.crt"
