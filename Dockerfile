# syntax=docker/dockerfile:1
# Build stage: install every dependency (isolated-vm compiles with g++) and compile TypeScript.
FROM node:20-bookworm AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npx tsc -p tsconfig.build.json && npm prune --omit=dev

# Runtime stage: production dependencies and compiled code only, as a non-root user.
FROM node:20-bookworm-slim
ENV NODE_ENV=production PORT=3000 HOST=0.0.0.0
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY registry ./registry
COPY config ./config
RUN ln -s /app/dist/src/cli/main.js /usr/local/bin/tributary && chmod +x /app/dist/src/cli/main.js \
  && mkdir -p /app/data && chown -R node:node /app/data
USER node
EXPOSE 3000
# `tributary healthcheck` (no curl in the image): GET http://127.0.0.1:$PORT/readyz must answer 200
# within 2 s; --timeout leaves room for Node's start.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["tributary", "healthcheck"]
CMD ["node", "--no-node-snapshot", "dist/src/main.js"]
