# kilntainers as a team server: MCP over Streamable HTTP, computers as containers of the Docker
# engine whose socket is mounted in (see compose.yaml and the README's "Running it for a team").
FROM node:20-bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm install --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY native ./native
COPY src ./src
RUN npm run build && npm prune --omit=dev

FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini bubblewrap \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/native ./native
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
