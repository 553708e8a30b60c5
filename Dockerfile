# kilntainers as a team server: MCP over Streamable HTTP, computers as containers of the Docker
# engine whose socket is mounted in (see compose.yaml and the README's "Running it for a team").
#
# NODE_IMAGE: any Node.js >= 20.19 on Debian bookworm with node and npm on PATH; Docker Hub's
# node:20-bookworm-slim by default. CI builds one locally instead (scripts/node-base-image.sh: a
# debootstrapped Debian plus the machine's Node.js), since Debian bookworm's own nodejs is 18.x.
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm install --no-audit --no-fund
# What .dockerignore lets through: sources, scripts, and prebuilt/ and wasm/build/ when they exist.
COPY . .
RUN npx tsc -p tsconfig.build.json && node scripts/build-dashboard.mjs
# The native helpers: prebuilt/ when it fits these sources, else compiled here with Debian's gcc.
RUN node scripts/build-native.mjs || { \
      echo "Dockerfile: compiling the native helpers with build-essential" >&2 \
      && apt-get update && apt-get install -y --no-install-recommends build-essential \
      && node scripts/build-native.mjs; }
RUN npm prune --omit=dev && mkdir -p native/build prebuilt wasm/build

FROM ${NODE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini bubblewrap \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# The npm package's layout: dist, the helpers (compiled or prebuilt, each with its manifest), the
# build script for other platforms, the WASI toolset when it was built (bash wasm/build.sh), and the
# computer image's recipe (built on the host's engine when a computer first needs it).
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src
COPY --from=build /app/native ./native
COPY --from=build /app/prebuilt ./prebuilt
COPY --from=build /app/scripts/build-native.mjs /app/scripts/native-sources.mjs ./scripts/
COPY --from=build /app/wasm/build ./wasm/build
COPY --from=build /app/images ./images
ENV NODE_ENV=production \
    KILNTAINERS_TRANSPORT=http \
    KILNTAINERS_HOST=0.0.0.0 \
    KILNTAINERS_PORT=8435 \
    KILNTAINERS_BACKEND=docker \
    KILNTAINERS_STATE_DIR=/var/lib/kilntainers
VOLUME /var/lib/kilntainers
EXPOSE 8435
HEALTHCHECK --interval=30s --timeout=5s CMD ["node", "-e", "fetch('http://127.0.0.1:8435/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["tini", "--", "node", "dist/src/cli/bin.js"]
